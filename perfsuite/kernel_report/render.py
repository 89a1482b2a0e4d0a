"""``perfsuite kernel-report`` on the console, fitted to the terminal (``perfsuite.fit``;
layout: docs/kernel.md); with ``--baseline``, the builds that changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich import box
from rich.markup import escape

from perfsuite.fit import Column, TrimmedConsole, fit_table, fold, print_fitted

from .diff import Comparison

_BOX: dict[str, Any] = dict(box=box.SIMPLE_HEAD, pad_edge=False)

# (header, row key, format): a format of None is a text column (left, folding); a key
# ``a+b`` sums the row's counts, ``a/b`` pairs them. Each table's title above its columns.
COST_TITLE = (
    "Static costs at {where}, {dtype}: forward grid; bwd columns: the atomic-tile backward "
    "(backward='tiles', an ablation) and CCE's, every pair (no filtering); lock trips = "
    "CAS + EXCH per locked update, per 1000 logits"
)
COST_COLUMNS = (
    ("impl", "impl", None),
    ("GPU", "gpu", None),
    ("fwd config", "fwd_config", None),
    ("fwd CTAs", "fwd_ctas", "{}"),
    ("splits", "fwd_splits", "{}"),
    ("CTA/SM", "ctas_per_sm", "{}"),
    ("waves", "fwd_waves", "{}"),
    ("last wave", "last_wave_eff", "{:.1%}"),
    ("fwd locks/1k", "fwd_lock_trips_per_1k_logits", "{:.2f}"),
    ("bwd config", "bwd_config", None),
    ("bwd pairs", "bwd_pairs", "{:,}"),
    ("recompute GB", "recompute_gb", "{:,.1f}"),
    ("update GB", "update_gb", "{:,.1f}"),
    ("locked RMW GB", "locked_rmw_gb", "{:,.1f}"),
    ("total bwd L2 GB", "bwd_l2_gb", "{:,.1f}"),
    ("bwd locks/1k", "lock_trips_per_1k_logits", "{:.2f}"),
)
DESIGN_TITLE = (
    "Backward designs at {where}, {dtype}: a MODEL, not a measurement "
    "(kernel_report/costs.py): ms = max(GEMM FLOPs / rate, HBM / bandwidth, L2 / L2 rate) "
    "at the rates in the notes below; HBM GB≥: each launch's operands read and outputs "
    "written once (a lower bound); G trip: the slice G written once, read twice; atomic GB: "
    "hardware atomic adds; locked GB: updates and reads under a spin lock"
)
DESIGN_COLUMNS = (
    ("GPU", "gpu", None),
    ("design", "design", None),
    ("config", "config", None),
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
    ("bound", "bound", None),
)
LAUNCHED_TITLE = (
    "Backward tile list on the first rows of each workload at {where}: launched pairs of the "
    "sample (per-row mass budget, kernels/tiles.py); modelled = the cost table's full "
    "figures × fraction"
)
LAUNCHED_COLUMNS = (
    ("GPU", "gpu", None),
    ("workload", "workload", None),
    ("entropy", "entropy", "{:.2f}"),
    ("rows", "rows", "{:,}"),
    ("bwd config", "bwd_config", None),
    ("pairs", "pairs", "{:,}"),
    ("launched", "launched", "{:,}"),
    ("fraction", "launched_fraction", "{:.1%}"),
    ("modelled recompute GB", "recompute_gb", "{:,.1f}"),
    ("modelled total bwd L2 GB", "bwd_l2_gb", "{:,.1f}"),
)
# The report's tables after the builds: (its key, title, columns), in order.
TABLES = (
    ("costs", COST_TITLE, COST_COLUMNS),
    ("designs", DESIGN_TITLE, DESIGN_COLUMNS),
    ("launched", LAUNCHED_TITLE, LAUNCHED_COLUMNS),
)


def _cell(row: dict[str, Any], key: str, fmt: str | None) -> str:
    """``row``'s value under ``key`` (see the columns), formatted; "-" when it has none."""
    sep = "/" if "/" in key else "+"
    values = [row.get(k) for k in key.split(sep)]
    if None in values:
        return "-"
    if sep == "/":
        return escape("/".join(map(str, values)))
    return escape((fmt or "{}").format(sum(values) if len(values) > 1 else values[0]))


def _columns(columns: tuple) -> list[Column]:
    return [Column(h, "left" if f is None else "right", f is None) for h, _, f in columns]


def _print(console: Any, title: str, spec: tuple, records: list[dict[str, Any]]) -> None:
    """The ``spec`` columns of ``records`` fitted to the console; too wide, turned on their
    side per GPU (a row per figure, a column per impl, design or workload)."""
    columns = _columns(spec)
    rows = [[_cell(r, k, f) for _, k, f in spec] for r in records]
    options = dict(_BOX, title_justify="left")
    table = fit_table(columns, rows, console.width, title=title, **options)
    if table is not None:
        console.print(table)
        return
    heads = [c.header for c in columns]
    # A column per impl, design or workload: the first text column other than the GPU.
    gpu = heads.index("GPU")
    name = next(i for i, c in enumerate(columns) if c.fold and i != gpu)
    console.print(title)
    for where in dict.fromkeys(r[gpu] for r in rows):
        mine = [r for r in rows if r[gpu] == where]
        turned = [Column(where, "left", False), *(Column(r[name], "right", True) for r in mine)]
        cells = [
            [heads[i], *(r[i] for r in mine)] for i in range(len(heads)) if i not in (gpu, name)
        ]
        print_fitted(console, turned, cells, **options)


def _where(report: dict[str, Any]) -> str:
    shape = report["shape"]
    return f"{shape['name']} (N={shape['n']}, V={shape['v']}, D={shape['d']})"


def render(report: dict[str, Any], problems: list[str]) -> None:
    """Print ``report`` and its ``problems`` fitted to the terminal ($COLUMNS, else 80)."""
    console = TrimmedConsole(highlight=False)
    shape, where = report["shape"], _where(report)
    console.print(f"Triton kernels built as launched at {where}", style="bold")
    console.print(LEGEND)
    for kernel, rows in by_kernel(report["rows"]).items():
        console.print()
        kernel_table(console, kernel, rows)
    for key, title, spec in TABLES:
        if report.get(key):
            _print(console, title.format(where=where, dtype=shape["dtype"]), spec, report[key])
    _footer(console, report.get("notes", []), problems)


def _footer(console: Any, notes: list[str], problems: list[str]) -> None:
    for note in notes:
        console.print(f"note: {escape(note)}")
    for p in problems:
        console.print(f"[red]FAIL[/red] {escape(p)}")


BUILD_COLUMNS = (
    ("variant", "variant", None),
    ("dtype", "dtype", None),
    ("arch", "arch", None),
    ("config", "config", None),
    ("regs", "registers", "{}"),
    ("spill", "spill_store_bytes/spill_load_bytes", "{}"),
    ("smem", "shared_bytes", "{}"),
    ("CTA/SM", "ctas_per_sm", "{}"),
    ("MMA", "hgmma+hmma+utcmma", "{}"),
    ("MMA shape", "mma_shape", None),
    ("TMA", "tma_loads/tma_stores", "{}"),
    ("TMEM", "tmem_cols", "{}"),
    ("LDGSTS", "ldgsts", "{}"),
    ("MEMBAR", "membar", "{}"),
    ("CAS", "cas", "{}"),
    ("adds", "atomic_adds", "{}"),
    ("TC in lock", "critical_tensor_ops", "{}"),
    ("instrs", "instructions", "{}"),
    ("grid", "grid", "{}"),
    ("waves", "waves", "{:.2f}"),
)
# Left out first when a kernel's table is too wide for the terminal.
DROP_ORDER = ("adds", "MEMBAR", "LDGSTS", "TMEM", "smem", "CAS", "instrs", "config")
LEGEND = (
    "spill: bytes per thread stored/loaded; smem: bytes per CTA; MMA: tensor-core "
    "instructions (HMMA on sm_80, HGMMA on sm_90a, UTCMMA on sm_100a) and their "
    "M×N×K; TMA: bulk tensor loads/stores (UTMALDG/UTMASTG); TMEM: "
    "tensor-memory columns per CTA; TC in lock: tensor-core instructions between a CAS "
    "acquire and its EXCH release; instrs: SASS instructions; grid, waves: a persistent "
    "kernel's programs on the shape's GPU and grid ÷ (SMs × CTA/SM)"
)


def by_kernel(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows per kernel, kernels in the report's order; CCE's marked as theirs."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        name = r["kernel"] + ("" if r.get("ours", True) else " (CCE)")
        out.setdefault(name, []).append(r)
    return out


def kernel_table(console: Any, kernel: str, rows: list[dict[str, Any]]) -> None:
    """``rows`` of one kernel: a line naming what every build shares (its dtype, arch or
    config; the counts that are 0 in every build), then the widest table that fits."""
    cells = {h: [_cell(r, key, fmt) for r in rows] for h, key, fmt in BUILD_COLUMNS}
    # Text columns after the variant with one value (dtype, arch, config) go above the table.
    same = [h for h, _, fmt in BUILD_COLUMNS[1:] if fmt is None and len(set(cells[h])) == 1]
    shared = [cells[h][0] for h in same if cells[h][0] != "-"]
    zero = [h for h, _, fmt in BUILD_COLUMNS if fmt and set(cells[h]) <= {"0", "0/0"}]
    absent = [h for h in cells if set(cells[h]) == {"-"}]  # not this kernel's
    shown = [c for c in BUILD_COLUMNS if c[0] == "variant" or c[0] not in same + zero + absent]
    sections = [i for i in range(len(rows) - 1) if rows[i]["arch"] != rows[i + 1]["arch"]]
    left_out: list[str] = []
    while True:
        columns = _columns(shown)
        table_rows = [[cells[h][i] for h, _, _ in shown] for i in range(len(rows))]
        table = fit_table(columns, table_rows, console.width, sections, **_BOX)
        drop = next((h for h in DROP_ORDER if h in {c[0] for c in shown}), None)
        if table is not None or drop is None:
            break
        shown = [c for c in shown if c[0] != drop]
        left_out.append(drop)
    parts = [" ".join(shared)] if shared else []
    parts += [f"0 in every build: {', '.join(zero)}"] if zero else []
    parts += [f"left out at this width (in --json): {', '.join(left_out)}"] if left_out else []
    console.print(escape(kernel) + (f": {'; '.join(parts)}" if parts else ""))
    if table is not None:
        console.print(table)
    else:  # one block per build: nothing is cut at any width
        print_fitted(console, columns, table_rows, **_BOX)


DIFF_COLUMNS = (Column("build"), Column("what changed"), Column("verdict"))


def _toolchain(doc: dict[str, Any]) -> str:
    chain = doc.get("toolchain", {})
    ptxas = " / ".join(sorted(set(chain.get("ptxas", {}).values()))) or "?"
    return f"Triton {chain.get('triton', '?')} (ptxas {ptxas})"


def _plural(n: int) -> str:
    return f"{n} build{'' if n == 1 else 's'}"


def render_diff(
    comparison: Comparison,
    baseline: dict[str, Any],
    path: Path,
    report: dict[str, Any],
    problems: list[str],
) -> None:
    """Print ``comparison`` of this run (``report``) with the stored ``baseline``."""
    console = TrimmedConsole(highlight=False)
    console.print(f"kernel-report at {_where(report)}, threshold {comparison.threshold:.0%}")
    stored = fold(f"stored in {path}", console.width, path=True)
    console.print(escape(stored), soft_wrap=True)
    console.print(f"baseline: {_toolchain(baseline)}; this run: {_toolchain(report)}")
    if comparison.across_triton:
        console.print("across Triton versions: reported, never failing")
    if comparison.changed:
        rows = [
            [escape(c.build), escape(", ".join(c.changes)), escape(c.verdict)]
            for c in comparison.changed
        ]
        title = (
            f"Builds whose SASS changed (fails: a new spill, fewer CTAs/SM, an instruction "
            f"class or the total up more than {comparison.threshold:.0%})"
        )
        print_fitted(console, DIFF_COLUMNS, rows, title, **_BOX, title_justify="left")
    console.print(f"unchanged: {_plural(comparison.unchanged)} (same SASS)")
    failing = len(comparison.failing())
    console.print(f"changed: {_plural(len(comparison.changed))}, {failing} failing")
    for name in comparison.only_in_this_run:
        console.print(f"only in this run (not gated): {escape(name)}")
    for name in comparison.only_in_baseline:
        console.print(f"only in the baseline (not gated): {escape(name)}")
    # Of the notes, why CCE's stored builds are only in the baseline.
    _footer(console, [n for n in report.get("notes", []) if n.startswith("CCE")], problems)
