"""Rich tables for ``perfsuite kernel-report``: per-build rows, then the cost table."""

from __future__ import annotations

from typing import Any

from perfsuite.fit import Column, TrimmedConsole, print_fitted

# (header, row key); variant names like "[plain]" would read as rich markup inside
# the kernel name, so they get a column of their own and every cell is escaped.
BUILD_COLUMNS = (
    ("kernel", "kernel"),
    ("variant", "variant"),
    ("config", "config"),
    ("dtype", "dtype"),
    ("arch", "arch"),
    ("ok", "ok"),
    ("regs", "registers"),
    ("spill st", "spill_store_bytes"),
    ("spill ld", "spill_load_bytes"),
    ("smem", "shared_bytes"),
    ("CTA/SM", "ctas_per_sm"),
    ("HGMMA", "hgmma"),
    ("HMMA", "hmma"),
    ("UTCMMA", "utcmma"),  # Blackwell's tcgen05.mma
    ("TMEM", "tmem_cols"),  # tensor-memory columns per CTA (of 512 per SM)
    ("LDGSTS", "ldgsts"),
    ("MEMBAR", "membar"),
    ("CAS", "cas"),
    ("adds", "atomic_adds"),
    ("TC in lock", "critical_tensor_ops"),
)
_TEXT = {"kernel", "variant", "config", "dtype", "arch", "ok"}
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
    """Fitted to the console (``perfsuite.fit``): a table, or one block per row."""
    print_fitted(console, columns, rows, title, title_justify="left")


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
    columns = [
        Column(h, "left", True) if k in _TEXT else Column(h, "right", False)
        for h, k in BUILD_COLUMNS
    ]
    rows = []
    for r in report["rows"]:
        cells = {**r, "kernel": r["kernel"] + ("" if r.get("ours", True) else " (CCE)")}
        rows.append([_cell(cells.get(k)) for _, k in BUILD_COLUMNS])
    _print(
        console,
        f"Triton kernels built as launched at {where} (smem: bytes per CTA; spills: bytes "
        "per thread; TMEM: tensor-memory columns per CTA; TC in lock: tensor-core "
        "instructions between a CAS acquire and its EXCH release)",
        columns,
        rows,
    )
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
