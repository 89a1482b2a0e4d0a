"""The report's builds on the console: one fitted table per kernel (``perfsuite.fit``).

One table of every build had 20 columns: at 80 columns it became one block of
``header: value`` lines per build, thousands of lines. Per kernel, a column whose value
is the same in every row (a dtype, ``spill 0/0``, ``TC in lock 0``) is said once in the
table's title, and the tensor-core counts share one column (each arch has its own
instruction); when the table is still too wide the least-read counts are left out, the
title says which, and ``--json`` keeps every fact of every build.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich import box
from rich.markup import escape

from perfsuite.fit import Column, fit_table, print_fitted


def _count(*keys: str) -> Callable[[dict[str, Any]], Any]:
    def get(row: dict[str, Any]) -> Any:
        values = [row.get(k) for k in keys]
        return None if any(v is None for v in values) else sum(values)

    return get


def _spill(row: dict[str, Any]) -> Any:
    st, ld = row.get("spill_store_bytes"), row.get("spill_load_bytes")
    return None if st is None or ld is None else f"{st}/{ld}"


# (header, value of a row, text?): the text columns name the build.
COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], Any], bool], ...] = (
    ("variant", lambda r: r["variant"], True),
    ("dtype", lambda r: r["dtype"], True),
    ("arch", lambda r: r["arch"], True),
    ("config", lambda r: r["config"], True),
    ("regs", _count("registers"), False),
    ("spill", _spill, False),
    ("smem", _count("shared_bytes"), False),
    ("CTA/SM", _count("ctas_per_sm"), False),
    ("MMA", _count("hgmma", "hmma", "utcmma"), False),
    ("TMEM", _count("tmem_cols"), False),
    ("LDGSTS", _count("ldgsts"), False),
    ("MEMBAR", _count("membar"), False),
    ("CAS", _count("cas"), False),
    ("adds", _count("atomic_adds"), False),
    ("TC in lock", _count("critical_tensor_ops"), False),
    ("instrs", _count("instructions"), False),
)
# Left out first when a kernel's table is too wide for the terminal.
DROP_ORDER = ("adds", "MEMBAR", "LDGSTS", "TMEM", "smem", "CAS", "config")
LEGEND = (
    "spill: bytes per thread stored/loaded; smem: bytes per CTA; MMA: tensor-core "
    "instructions (HMMA on sm_80, HGMMA on sm_90a, UTCMMA on sm_100a); TMEM: "
    "tensor-memory columns per CTA; TC in lock: tensor-core instructions between a CAS "
    "acquire and its EXCH release; instrs: SASS instructions"
)


def _cell(value: Any) -> str:
    return "-" if value is None else escape(str(value))


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
    cells = {h: [_cell(get(r)) for r in rows] for h, get, _ in COLUMNS}
    shared = [
        cells[h][0] for h, _, text in COLUMNS if text and h != "variant" and len(set(cells[h])) == 1
    ]
    zero = [h for h, _, text in COLUMNS if not text and set(cells[h]) <= {"0", "0/0"}]
    shown = [
        c
        for c in COLUMNS
        if c[0] == "variant" or (c[0] not in zero and cells[c[0]][0] not in shared)
    ]
    # a line between archs
    sections = [i for i in range(len(rows) - 1) if rows[i]["arch"] != rows[i + 1]["arch"]]
    left_out: list[str] = []
    options = dict(box=box.SIMPLE_HEAD, pad_edge=False)
    while True:
        columns = [Column(h, "left" if text else "right", text) for h, _, text in shown]
        table_rows = [[cells[h][i] for h, _, _ in shown] for i in range(len(rows))]
        table = fit_table(columns, table_rows, console.width, sections, **options)
        drop = next((h for h in DROP_ORDER if any(c[0] == h for c in shown)), None)
        if table is None and drop is not None:
            shown = [c for c in shown if c[0] != drop]
            left_out.append(drop)
            continue
        parts = [" ".join(shared)] if shared else []
        if zero:
            parts.append(f"0 in every build: {', '.join(zero)}")
        if left_out:
            parts.append(f"left out at this width (in --json): {', '.join(left_out)}")
        line = escape(kernel) + (f": {'; '.join(parts)}" if parts else "")
        console.print(line, highlight=False)
        if table is not None:
            console.print(table)
        else:  # one block per build: nothing is cut at any width
            print_fitted(console, columns, table_rows, **options)
        return


def render_builds(console: Any, report: dict[str, Any], where: str) -> None:
    console.print(f"Triton kernels built as launched at {where}", style="bold", highlight=False)
    console.print(LEGEND, highlight=False)
    for kernel, rows in by_kernel(report["rows"]).items():
        console.print()
        kernel_table(console, kernel, rows)
