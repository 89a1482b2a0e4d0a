"""The tables of cells measured across ranks (``run --tp``): per (shape, β) a line per method
and TP size of one phase: rates, the per-rank floor, the scaling against its TP = 1."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from perfsuite.fit import BOX, Column, Grid, Notes
from perfsuite.plan.memory_model import floor_bytes
from perfsuite.plan.registry import methods_for
from perfsuite.render.cells import (
    by_cell,
    cell_marks,
    grads_in_forward,
    group_rows,
    mark_notes,
    measured,
    present_phases,
    shape_title,
    status_cell,
    tp_rows,
)
from perfsuite.render.roofline import phase_flops
from perfsuite.render.table import Cell
from perfsuite.units import BYTES, RATES, fmt_bytes, fmt_number, largest

# (key, header): the columns of a TP table, in order; {rate} and {mem}: the table's units.
COLUMNS = (
    ("method", "method"), ("tp", "TP"), ("ms", "p50 ms"), ("rate", "rank {rate}"),
    ("total", "all {rate}"), ("peak", "rank {mem}"), ("floor", "floor {mem}"), ("comm", "coll %"),
    ("colls", "colls"), ("speedup", "speedup"), ("memcut", "mem ÷"),
)  # fmt: skip
OPTIONAL = ("colls",)  # left out first when the table does not fit the terminal


@dataclass
class TpTable(Grid):
    """A TP table, its phase, its headers by column key and the marks its notes explain."""

    phase: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    marks: str = ""


def shard_rows(vocab: int, tp: int) -> int:
    """The largest rank's rows of C: ⌈V/K⌉ (``tp_method.shard_ranges``)."""
    return -(-vocab // tp)


def rank_floor(phase: str, row: dict[str, Any]) -> int:
    """What any method must hold on its largest rank: ``floor_bytes`` with ⌈V/K⌉ rows."""
    vocab = shard_rows(row["vocab"], row["tp"])
    return floor_bytes(phase, row["tokens"], vocab, row["hidden"], row["dtype"])


def _units(rows: list[dict[str, Any]], phase: str) -> tuple[float, str, float, str]:
    """(rate scale, unit, memory scale, unit) of a table: those its largest values fill."""
    rates, sizes = [0.0], [0]
    for r in rows:
        sizes.append(rank_floor(phase, r))
        if measured(r):
            sizes.append(r.get("peak_bytes") or 0)
            if r.get("median_ms"):
                flops = phase_flops(phase, r["tokens"], r["vocab"], r["hidden"])
                rates.append(flops / r["tp"] / (r["median_ms"] / 1e3))
    return (*largest(max(rates), RATES), *largest(max(sizes), BYTES[3:5]))


def _line(
    row: dict[str, Any],
    phase: str,
    reference: dict[str, Any] | None,
    units: tuple[float, str, float, str],
    in_fwd: bool,
) -> dict[str, str]:
    """A line's cells by column key, the time's in its style (red: wrong; dim: ‡)."""
    rate_scale, _, mem_scale, _ = units
    k = row["tp"]
    cells = {"method": row["method"], "tp": str(k)}
    cells["floor"] = fmt_number(rank_floor(phase, row), mem_scale)
    if not measured(row):
        return cells | {"ms": status_cell(row)}
    marks = cell_marks(row, phase, in_fwd)
    ms, peak = row.get("median_ms"), row.get("peak_bytes")
    style = "red" if row["status"] == "wrong" else "dim" if in_fwd and marks else ""
    cells["ms"] = Cell(fmt_number(ms), marks=marks, style=style).console()
    if ms and not (in_fwd and phase != "fwd+bwd"):  # a ‡ split does other FLOPs than these
        flops = phase_flops(phase, row["tokens"], row["vocab"], row["hidden"])
        cells["rate"] = fmt_number(flops / k / (ms / 1e3) / rate_scale)
        cells["total"] = fmt_number(flops / (ms / 1e3) / rate_scale)
    cells["peak"] = fmt_number(peak, mem_scale)
    comm = row.get("collective_ms")
    if comm is not None and ms:
        share = 100 * comm / ms
        cells["comm"] = f"{share:.0f}%" if share >= 9.5 else f"{share:.1f}%"
    if row.get("collectives") is not None:
        moved = row.get("collective_bytes")
        tail = "" if moved is None else f", {fmt_bytes(moved)}"
        cells["colls"] = str(row["collectives"]) + tail
    if reference is not None and measured(reference) and reference["status"] == "ok":
        for key, ours, theirs in (("speedup", ms, "median_ms"), ("memcut", peak, "peak_bytes")):
            if ours and reference.get(theirs):
                cells[key] = f"{reference[theirs] / ours:.2f}×"
    return cells


def _table(members: list[dict[str, Any]], known: dict[str, Any]) -> TpTable:
    first = members[0]
    phases = present_phases(members)
    phase = "fwd+bwd" if "fwd+bwd" in phases else phases[0]
    beta = first["beta"]
    title = (
        f"{shape_title(members)}, β={beta:g} on {first.get('device', '?')}: "
        f"{phase} across ranks (tensor-parallel)"
    )
    cells = by_cell(members)
    units = _units([by[phase] for by in cells.values() if phase in by], phase)
    _, rate_unit, _, mem_unit = units
    headers = {key: h.format(rate=rate_unit, mem=mem_unit) for key, h in COLUMNS}
    reasons, lines, marks = Notes(), [], ""
    for (method, k), by_phase in cells.items():
        row = by_phase.get(phase)
        in_fwd = grads_in_forward(method, known, beta)
        if row is None:
            line = {"method": method, "tp": str(k), "ms": "-"}
            why = f"no {phase} row ({', '.join(by_phase)} measured)"
        else:
            reference = cells.get((method, 1), {}).get(phase)
            line = _line(row, phase, reference, units, in_fwd)
            why = "" if row["status"] == "ok" else row["status"]
            why += f": {row['reason']}" if why and row.get("reason") else ""
            marks += cell_marks(row, phase, in_fwd) if measured(row) else ""
        lines.append(line | {"note": reasons.ref(why, f"{method} TP={k}") if why else ""})
    # the note column only where a line has a note
    keys = [key for key, _ in COLUMNS] + (["note"] if any(ln["note"] for ln in lines) else [])
    columns = [
        Column(key, fold=key == "method") if key in ("method", "note")
        else Column(headers[key], "right", False, key in OPTIONAL)
        for key in keys
    ]  # fmt: skip
    rows = [[line.get(key, "") for key in keys] for line in lines]
    return TpTable(columns, rows, title, reasons.lines(), BOX, (), phase, headers, marks)


def tp_tables(rows: Iterable[dict[str, Any]]) -> list[TpTable]:
    """The TP tables of ``rows`` (one-device rows ignored), format-independent."""
    groups = list(group_rows(tp_rows(rows)).values())
    # the methods across ranks, their own capabilities: asked only when there are such cells
    known = methods_for("tp") if groups else {}
    return [_table(members, known) for members in groups]


def tp_footnotes(tables: list[TpTable], rows: list[dict[str, Any]]) -> list[str]:
    """What the TP tables' columns and marks mean: said once under all of them."""
    if not tables:
        return []
    notes = [
        "TP K: the classifier split over V across K ranks (run --tp). Times are the max "
        "over ranks per step (p50 ms: the median of those); memory is the max over ranks of "
        "each rank's peak above its inputs (E, the targets and its C shard). floor: the "
        "least any method holds on a rank (docs/math.md's floor with ⌈V/K⌉ rows of C: N "
        "fp32 losses in fwd; with a backward the full dE and its dC shard, the part that "
        "falls as 1/K).",
        "rank FLOP/s: a 1/K share of the phase's FLOPs (2NVD fwd, 6NVD bwd recomputing the "
        "logits, 8NVD fwd+bwd) over p50; all: the sum over the K ranks.",
        "coll %: the collectives' time per call (on the rank where it was largest) over "
        "p50; colls: collectives one rank issues per call, and the bytes they move; blank "
        "where not profiled.",
        "speedup, mem ÷: TP=1's p50 and peak over this line's, same method and harness "
        "(K is perfect scaling; memory stops short of it, dE being whole on every rank); "
        "blank without an ok TP=1 cell.",
    ]
    shown = "".join(t.marks for t in tables)
    return notes + [n for n in mark_notes(tp_rows(rows)) if n.startswith("CPU") or n[0] in shown]


def print_tp_tables(console: Console, document: dict[str, Any]) -> None:
    """The TP tables of ``document`` and their notes (nothing when it has no TP cell)."""
    tables = tp_tables(document["rows"])
    narrow = False
    for table in tables:
        colls = [i for i, c in enumerate(table.columns) if c.header == "colls"]
        narrow |= table.print(console) and any(r[i] for r in table.rows for i in colls)
    if narrow:
        console.print(
            f"colls left out at {console.width} columns (a wider terminal shows them; "
            "`perfsuite report --format csv` has every number).",
            style="dim",
            highlight=False,
        )
    for note in tp_footnotes(tables, document["rows"]):
        console.print(note, style="dim", highlight=False)
