"""``perfsuite kernel-report`` on the console, fitted to the terminal (``perfsuite.fit``):
the builds (one table per kernel), the cost table, the backward designs, the launched
fraction; with ``--baseline``, the builds that changed (layout: docs/kernel.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich import box
from rich.markup import escape

from perfsuite.fit import Column, TrimmedConsole, fit_table, fold, print_fitted

from .diff import Comparison

_BOX: dict[str, Any] = dict(box=box.SIMPLE_HEAD, pad_edge=False)

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
    if value is None:
        return "-"
    return escape(fmt.format(value))


def _print(console: Any, title: str, columns: list[Column], rows: list[list[str]]) -> None:
    """Fitted to the console (``perfsuite.fit``): a table; when it is too wide, the same
    cells turned on their side per GPU (a row per figure, a column per impl or design);
    else one block per row."""
    options = dict(_BOX, title_justify="left")
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


def _where(report: dict[str, Any]) -> str:
    shape = report["shape"]
    return f"{shape['name']} (N={shape['n']}, V={shape['v']}, D={shape['d']})"


def render(report: dict[str, Any], problems: list[str]) -> None:
    console = TrimmedConsole()  # the terminal's width, $COLUMNS, else 80: tables fit or list
    shape, where = report["shape"], _where(report)
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
            "(kernel_report/costs.py): ms = max(GEMM FLOPs / rate, HBM / bandwidth, "
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


def _count(*keys: str) -> Callable[[dict[str, Any]], Any]:
    def get(row: dict[str, Any]) -> Any:
        values = [row.get(k) for k in keys]
        return None if any(v is None for v in values) else sum(values)

    return get


def _pair(first: str, second: str) -> Callable[[dict[str, Any]], Any]:
    def get(row: dict[str, Any]) -> Any:
        a, b = row.get(first), row.get(second)
        return None if a is None or b is None else f"{a}/{b}"

    return get


_spill = _pair("spill_store_bytes", "spill_load_bytes")


# (header, value of a row, text?): the text columns name the build.
BUILD_COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], Any], bool], ...] = (
    ("variant", lambda r: r["variant"], True),
    ("dtype", lambda r: r["dtype"], True),
    ("arch", lambda r: r["arch"], True),
    ("config", lambda r: r["config"], True),
    ("regs", _count("registers"), False),
    ("spill", _spill, False),
    ("smem", _count("shared_bytes"), False),
    ("CTA/SM", _count("ctas_per_sm"), False),
    ("MMA", _count("hgmma", "hmma", "utcmma"), False),
    ("MMA shape", lambda r: r.get("mma_shape"), True),
    ("TMA", _pair("tma_loads", "tma_stores"), False),
    ("TMEM", _count("tmem_cols"), False),
    ("LDGSTS", _count("ldgsts"), False),
    ("MEMBAR", _count("membar"), False),
    ("CAS", _count("cas"), False),
    ("adds", _count("atomic_adds"), False),
    ("TC in lock", _count("critical_tensor_ops"), False),
    ("instrs", _count("instructions"), False),
    ("grid", _count("grid"), False),
    ("waves", lambda r: None if r.get("waves") is None else f"{r['waves']:.2f}", False),
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
    cells = {h: [_cell(get(r)) for r in rows] for h, get, _ in BUILD_COLUMNS}
    shared = [
        cells[h][0]
        for h, _, text in BUILD_COLUMNS
        if text and h != "variant" and len(set(cells[h])) == 1
    ]
    zero = [h for h, _, text in BUILD_COLUMNS if not text and set(cells[h]) <= {"0", "0/0"}]
    absent = {h for h, _, _ in BUILD_COLUMNS if set(cells[h]) == {"-"}}  # not this kernel's
    shared = [s for s in shared if s != "-"]
    shown = [
        c
        for c in BUILD_COLUMNS
        if c[0] == "variant"
        or (c[0] not in zero and c[0] not in absent and cells[c[0]][0] not in shared)
    ]
    # a line between archs
    sections = [i for i in range(len(rows) - 1) if rows[i]["arch"] != rows[i + 1]["arch"]]
    left_out: list[str] = []
    while True:
        columns = [Column(h, "left" if text else "right", text) for h, _, text in shown]
        table_rows = [[cells[h][i] for h, _, _ in shown] for i in range(len(rows))]
        table = fit_table(columns, table_rows, console.width, sections, **_BOX)
        drop = next((h for h in DROP_ORDER if h in {c[0] for c in shown}), None)
        if table is not None or drop is None:
            break
        shown = [c for c in shown if c[0] != drop]
        left_out.append(drop)
    parts = [" ".join(shared)] if shared else []
    if zero:
        parts.append(f"0 in every build: {', '.join(zero)}")
    if left_out:
        parts.append(f"left out at this width (in --json): {', '.join(left_out)}")
    console.print(escape(kernel) + (f": {'; '.join(parts)}" if parts else ""), highlight=False)
    if table is not None:
        console.print(table)
    else:  # one block per build: nothing is cut at any width
        print_fitted(console, columns, table_rows, **_BOX)


def render_builds(console: Any, report: dict[str, Any], where: str) -> None:
    console.print(f"Triton kernels built as launched at {where}", style="bold", highlight=False)
    console.print(LEGEND, highlight=False)
    for kernel, rows in by_kernel(report["rows"]).items():
        console.print()
        kernel_table(console, kernel, rows)


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
    console: Any = None,
) -> None:
    """Print ``comparison`` of this run (``report``) with the stored ``baseline``."""
    console = console or TrimmedConsole()
    console.print(
        f"kernel-report at {_where(report)}, threshold {comparison.threshold:.0%}", highlight=False
    )
    stored = fold(f"stored in {path}", console.width, path=True)
    console.print(escape(stored), highlight=False, soft_wrap=True)
    console.print(
        f"baseline: {_toolchain(baseline)}; this run: {_toolchain(report)}", highlight=False
    )
    if comparison.across:
        console.print("across Triton versions: reported, never failing", highlight=False)
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
    console.print(f"unchanged: {_plural(comparison.unchanged)} (same SASS)", highlight=False)
    failing = len(comparison.failing())
    changed = f"changed: {_plural(len(comparison.changed))}, {failing} failing"
    console.print(changed, highlight=False)
    for label, names in (
        ("only in this run", comparison.only_new),
        ("only in the baseline", comparison.only_old),
    ):
        for name in names:
            console.print(f"{label} (not gated): {escape(name)}", highlight=False)
    for note in report.get("notes", []):
        if note.startswith("CCE"):  # why CCE's stored builds are only in the baseline
            console.print(f"note: {escape(note)}", highlight=False)
    for p in problems:
        console.print(f"[red]FAIL[/red] {escape(p)}", highlight=False)
