"""Where a cell's time goes, as text: per cell a stacked bar per method (a letter per
class, ``.`` for the host), scaled to the longest wall time, then the top kernels."""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from typing import Any

from perfsuite.fit import BOX, Column, TrimmedConsole, fold, print_fitted
from perfsuite.measure.kernel_classes import CLASSES
from perfsuite.render.cells import group_rows
from perfsuite.units import fmt_number

LETTERS = {"gemm": "G", "ours": "O", "peer": "P", "elementwise": "E", "copy": "C",
           "collective": "N", "other": "x"}  # fmt: skip
HOST = "."
SOURCES = {"cuda-kernels": "CUDA kernels", "cpu-ops": "CPU ops, no GPU"}
MIN_BAR = 10
NAME_LIMIT = 36  # a longer kernel name shows its head and tail (the row keeps it whole)


def breakdown_lines(rows: Iterable[dict[str, Any]], width: int = 80) -> list[str]:
    """Per cell (shape, dtype, β, phase) with a breakdown: title, legend, one bar per
    method, the top kernels; no line wider than ``width``. [] when no row has one."""
    lines: list[str] = []
    for members in group_rows((r for r in rows if r.get("breakdown")), _cell).values():
        if lines:
            lines.append("")
        lines += [*_title(members, width), *_bars(members, width), "", *_top_table(members, width)]
    return lines


def breakdown_figures(rows: Iterable[dict[str, Any]]) -> list[tuple[str, Any]]:
    """``(file name, matplotlib figure)`` per cell with a breakdown: a bar per method, its
    wall time stacked by class and the host's share."""
    from matplotlib.figure import Figure

    made = []
    for members in group_rows((r for r in rows if r.get("breakdown")), _cell).values():
        fig = Figure(figsize=(8, 1.6 + 0.45 * len(members)), layout="constrained")
        ax = fig.subplots()
        names = [m["method"] for m in members]
        left = [0.0] * len(members)
        for part in (*CLASSES, "host"):
            ms = [m["breakdown"].get("host_ms", 0.0) if part == "host"
                  else m["breakdown"]["classes"].get(part, 0.0) for m in members]  # fmt: skip
            if any(ms):
                ax.barh(names, ms, left=left, label=part)
                left = [a + b for a, b in zip(left, ms, strict=True)]
        ax.invert_yaxis()
        ax.set_xlabel("ms of one profiled call")
        ax.set_title(_title(members, 200)[0].removeprefix("where the time goes: "))
        fig.legend(ncols=8, fontsize="small", loc="outside lower center")  # clear of the bars
        shape, _, _, _, dtype, beta, phase = _cell(members[0])
        stem = f"breakdown-{shape}-{dtype}-b{beta:g}-{phase}".replace("+", "")
        name = re.sub(r"[^A-Za-z0-9._-]", "", stem) + ".png"  # smoke* (overridden) too
        made.append((name, fig))
    return made


def _cell(row: dict[str, Any]) -> tuple:
    return tuple(map(row.get, ("shape", "tokens", "vocab", "hidden", "dtype", "beta", "phase")))


def _title(members: list[dict[str, Any]], width: int) -> list[str]:
    row = members[0]
    sources = sorted({m["breakdown"]["source"] for m in members})
    measured = ", ".join(SOURCES.get(s, s) for s in sources)
    title = (
        f"where the time goes: {row['shape']} {row['dtype']} β={row['beta']:g} {row['phase']} "
        f"({measured})"
    )
    legend = "  ".join(f"{LETTERS[c]} {c}" for c in CLASSES) + f"  {HOST} host"
    return fold(title, width).split("\n") + fold(legend, width).split("\n")


def _bars(members: list[dict[str, Any]], width: int) -> list[str]:
    heads = ("wall ms", "host ms", "launches")
    numbers = [
        (fmt_number(b["wall_ms"]), fmt_number(max(b["host_ms"], 0.0)), str(b["launches"]))
        for b in (m["breakdown"] for m in members)
    ]
    widths = [max(len(h), *(len(n[i]) for n in numbers)) for i, h in enumerate(heads)]
    fixed = sum(widths) + len(widths)  # a space before each number
    name_w = max(len("method"), *(len(str(m["method"])) for m in members))
    name_w = max(min(name_w, width - fixed - 1 - MIN_BAR), 8)
    bar_w = max(width - fixed - 1 - name_w, 1)
    longest = max(max(m["breakdown"]["wall_ms"], 0.0) for m in members) or 1.0
    tail = " ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True))
    out = [f"{'method'.ljust(name_w)} {''.ljust(bar_w)} {tail}".rstrip()]
    for member, nums in zip(members, numbers, strict=True):
        bar = stacked_bar(member["breakdown"], bar_w / longest)
        first, *more = fold(str(member["method"]), name_w).split("\n")
        cells = " ".join(n.rjust(w) for n, w in zip(nums, widths, strict=True))
        out.append(f"{first.ljust(name_w)} {bar.ljust(bar_w)} {cells}")
        out += more
    return out


def stacked_bar(breakdown: dict[str, Any], per_ms: float) -> str:
    """``breakdown``'s wall time as ``per_ms`` characters a millisecond: the device's
    busy time split by class in proportion, then the host's share."""
    wall = max(breakdown["wall_ms"], 0.0)
    host = min(max(breakdown["host_ms"], 0.0), wall)
    classes = breakdown["classes"]
    total = sum(classes.get(c, 0.0) for c in CLASSES)
    busy = wall - host
    parts = [(LETTERS[c], busy * classes.get(c, 0.0) / total if total else 0.0) for c in CLASSES]
    parts.append((HOST, host if total else wall))
    bar, done, position = "", 0.0, 0
    for letter, ms in parts:
        done += ms
        end = round(done * per_ms)
        bar += letter * max(end - position, 0)
        position = max(end, position)
    return bar


def short_name(name: str) -> str:
    """``name`` itself, or its head and tail around ``...`` when longer than ``NAME_LIMIT``."""
    tail = NAME_LIMIT // 3
    return name if len(name) <= NAME_LIMIT else f"{name[: NAME_LIMIT - tail - 3]}...{name[-tail:]}"


def _top_table(members: list[dict[str, Any]], width: int) -> list[str]:
    cuda = any(m["breakdown"]["source"] == "cuda-kernels" for m in members)
    columns = [Column(h) for h in ("method", "top kernels" if cuda else "top ops", "class")]
    columns += [Column(h, "right", False) for h in ("calls", "ms", "share %")]
    rows, sections = [], []
    for member in members:
        breakdown = member["breakdown"]
        total = sum(breakdown["classes"].values()) or 1.0
        for i, top in enumerate(breakdown["top"]):
            rows.append([
                str(member["method"]) if i == 0 else "",
                short_name(top["name"]),
                top["class"],
                str(top["calls"]),
                fmt_number(top["ms"]),
                f"{100 * top['ms'] / total:.1f}",
            ])  # fmt: skip
        if rows:
            sections.append(len(rows) - 1)
    if not rows:
        return []
    console = TrimmedConsole(file=io.StringIO(), width=width, color_system=None, highlight=False)
    print_fitted(console, columns, rows, sections=sections[:-1], **BOX)
    return console.file.getvalue().strip("\n").split("\n")
