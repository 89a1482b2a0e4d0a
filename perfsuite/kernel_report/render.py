"""Rich tables for ``perfsuite kernel-report``: the builds (one table per kernel,
``build_table``), the cost table, the backward designs, the launched fraction."""

from __future__ import annotations

from typing import Any

from rich import box

from perfsuite.fit import Column, TrimmedConsole, fit_table, print_fitted

from .build_table import render_builds

_TEXT_COSTS = {"impl", "gpu", "workload", "fwd_config", "bwd_config", "design", "config", "bound"}

COST_COLUMNS = (
    ("impl", "impl", "{}"),
    ("GPU", "gpu", "{}"),
    ("fwd config", "fwd_config", "{}"),
    ("fwd CTAs", "fwd_ctas", "{}"),
    ("splits", "fwd_splits", "{}"),
    ("CTA/SM", "ctas_per_sm", "{}"),
    ("waves", "fwd_waves", "{}"),
    ("last wave", "last_wave_eff", "{:.1%}"),
    ("fwd locks/1k", "fwd_lock_trips_per_1k_logits", "{:.2f}"),
    ("bwd config", "bwd_config", "{}"),
    ("bwd pairs", "bwd_pairs", "{:,}"),
    ("recompute GB", "recompute_gb", "{:,.1f}"),
    ("update GB", "update_gb", "{:,.1f}"),
    ("locked RMW GB", "locked_rmw_gb", "{:,.1f}"),
    ("total bwd L2 GB", "bwd_l2_gb", "{:,.1f}"),
    ("bwd locks/1k", "lock_trips_per_1k_logits", "{:.2f}"),
)


LAUNCHED_COLUMNS = (
    ("GPU", "gpu", "{}"),
    ("workload", "workload", "{}"),
    ("entropy", "entropy", "{:.2f}"),
    ("rows", "rows", "{:,}"),
    ("bwd config", "bwd_config", "{}"),
    ("pairs", "pairs", "{:,}"),
    ("launched", "launched", "{:,}"),
    ("fraction", "launched_fraction", "{:.1%}"),
    ("modelled recompute GB", "recompute_gb", "{:,.1f}"),
    ("modelled total bwd L2 GB", "bwd_l2_gb", "{:,.1f}"),
)

DESIGN_COLUMNS = (
    ("GPU", "gpu", "{}"),
    ("design", "design", "{}"),
    ("config", "config", "{}"),
    ("slices", "slices", "{}"),
    ("width", "width", "{}"),
    ("TFLOP", "gemm_tflop", "{:,.1f}"),
    ("HBM GB≥", "hbm_bytes", "{:,.1f}"),
    ("G trip GB", "g_trip_bytes", "{:,.1f}"),
    ("dE r+w GB", "de_rw_bytes", "{:,.1f}"),
    ("total bwd L2 GB", "l2_bytes", "{:,.1f}"),
    ("atomic GB", "atomic_bytes", "{:,.1f}"),
    ("locked GB", "locked_bytes", "{:,.1f}"),
    ("GEMM ms", "gemm_ms", "{:,.1f}"),
    ("HBM ms", "hbm_ms", "{:,.1f}"),
    ("L2 ms", "l2_ms", "{:,.1f}"),
    ("modelled ms", "modelled_ms", "{:,.1f}"),
    ("bound", "bound", "{}"),
)


def _cell(value: Any, fmt: str = "{}") -> str:
    from rich.markup import escape

    if value is None:
        return "-"
    return escape(fmt.format(value))


def _print(console: Any, title: str, columns: list[Column], rows: list[list[str]]) -> None:
    """Fitted to the console (``perfsuite.fit``): a table; when it is too wide, the same
    cells turned on their side per GPU (a row per figure, a column per impl or design);
    else one block per row."""
    options = dict(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    table = fit_table(columns, rows, console.width, title=title, **options)
    if table is not None:
        console.print(table)
        return
    heads = [c.header for c in columns]
    if "GPU" not in heads:
        print_fitted(console, columns, rows, title, **options)
        return
    gpu, name = heads.index("GPU"), heads.index("design" if "design" in heads else "impl")
    console.print(title, highlight=False)
    for where in dict.fromkeys(r[gpu] for r in rows):
        mine = [r for r in rows if r[gpu] == where]
        turned = [Column(where, "left", False), *(Column(r[name], "right", True) for r in mine)]
        cells = [
            [heads[i], *(r[i] for r in mine)] for i in range(len(heads)) if i not in (gpu, name)
        ]
        print_fitted(console, turned, cells, **options)


def _costs(columns: tuple, rows: list[dict[str, Any]]) -> tuple[list[Column], list[list[str]]]:
    """(header, key, format) ``columns`` of ``rows`` as fitted columns and cells."""
    cols = [
        Column(h, "left", True) if k in _TEXT_COSTS else Column(h, "right", False)
        for h, k, _ in columns
    ]
    return cols, [[_cell(r.get(k), fmt) for _, k, fmt in columns] for r in rows]


def render(report: dict[str, Any], problems: list[str]) -> None:
    console = TrimmedConsole()  # the terminal's width, $COLUMNS, else 80: tables fit or list
    shape = report["shape"]
    where = f"{shape['name']} (N={shape['n']}, V={shape['v']}, D={shape['d']})"
    render_builds(console, report, where)
    _print(
        console,
        f"Static costs at {where}, {shape['dtype']}: forward grid; bwd columns: the "
        "atomic-tile backward (backward='tiles', an ablation) and CCE's, every pair "
        "(no filtering); lock trips = CAS + EXCH per locked update, per 1000 logits",
        *_costs(COST_COLUMNS, report["costs"]),
    )
    if report.get("designs"):
        _print(
            console,
            f"Backward designs at {where}, {shape['dtype']}: a MODEL, not a measurement "
            "(kernel_report/designs.py): ms = max(GEMM FLOPs / rate, HBM / bandwidth, "
            "L2 / L2 rate) at the rates in the notes below; HBM GB≥: each launch's "
            "operands read and outputs written once (a lower bound); G trip: the slice "
            "G written once, read twice; atomic GB: hardware atomic adds; locked GB: "
            "updates and reads under a spin lock",
            *_costs(DESIGN_COLUMNS, report["designs"]),
        )
    if report.get("launched"):
        _print(
            console,
            f"Backward tile list on the first rows of each workload at {where}: launched "
            "pairs of the sample (per-row mass budget, kernels/tiles.py); modelled = the "
            "cost table's full figures × fraction",
            *_costs(LAUNCHED_COLUMNS, report["launched"]),
        )
    for note in report.get("notes", []):
        console.print(f"note: {_cell(note)}")
    for p in problems:
        console.print(f"[red]FAIL[/red] {_cell(p)}")
