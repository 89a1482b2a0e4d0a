"""Rich tables for ``perfsuite kernel-report``: per-build rows, then the cost table."""

from __future__ import annotations

from typing import Any

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


def _table(title: str, columns: tuple, rows: list[dict[str, Any]]) -> Any:
    """A rich table of ``rows`` with (header, key, format) ``columns``."""
    from rich.table import Table

    table = Table(title=title)
    for header, key, _ in columns:
        table.add_column(header, justify="left" if key in _TEXT_COSTS else "right")
    for r in rows:
        table.add_row(*(_cell(r.get(k), fmt) for _, k, fmt in columns))
    return table


def render(report: dict[str, Any], problems: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # a CI log or a file: rows whole, not squeezed to 80
        console = Console(width=240)
    shape = report["shape"]
    where = f"{shape['name']} (N={shape['n']}, V={shape['v']}, D={shape['d']})"
    table = Table(
        title=f"Triton kernels built as launched at {where} "
        "(smem: bytes per CTA; spills: bytes per thread; TC in lock: tensor-core "
        "instructions between a CAS acquire and its EXCH release)"
    )
    for header, key in BUILD_COLUMNS:
        table.add_column(header, justify="left" if key in _TEXT else "right", overflow="fold")
    for r in report["rows"]:
        cells = {**r, "kernel": r["kernel"] + ("" if r.get("ours", True) else " (CCE)")}
        table.add_row(*(_cell(cells.get(k)) for _, k in BUILD_COLUMNS))
    console.print(table)

    console.print(
        _table(
            f"Static costs at {where}, {shape['dtype']}: forward grid; bwd columns: the "
            "atomic-tile backward (backward='tiles', an ablation) and CCE's, every pair "
            "(no filtering); lock trips = CAS + EXCH per locked update, per 1000 logits",
            COST_COLUMNS,
            report["costs"],
        )
    )
    if report.get("designs"):
        console.print(
            _table(
                f"Backward designs at {where}, {shape['dtype']}: a MODEL, not a measurement "
                "(kernel_report/designs.py): ms = max(GEMM FLOPs / rate, HBM / bandwidth, "
                "L2 / L2 rate) at the rates in the notes below; HBM GB≥: each launch's "
                "operands read and outputs written once (a lower bound); G trip: the slice "
                "G written once, read twice; atomic GB: hardware atomic adds; locked GB: "
                "updates and reads under a spin lock",
                DESIGN_COLUMNS,
                report["designs"],
            )
        )
    if report.get("launched"):
        console.print(
            _table(
                f"Backward tile list on the first rows of each workload at {where}: "
                "launched pairs of the sample (per-row mass budget, kernels/tiles.py); "
                "modelled = the cost table's full figures × fraction",
                LAUNCHED_COLUMNS,
                report["launched"],
            )
        )
    for note in report.get("notes", []):
        console.print(f"note: {_cell(note)}")
    for p in problems:
        console.print(f"[red]FAIL[/red] {_cell(p)}")
