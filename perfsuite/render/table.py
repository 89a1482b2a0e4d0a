"""The paper's table, laid out once (``build_report``): per shape a table of β sections, a
line per method of a memory, a time and an analytic cell per phase, each column's best marked."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from perfsuite.fit import BOX, Column, Grid, Notes, TrimmedConsole
from perfsuite.plan.memory_model import floor_bytes
from perfsuite.render.cells import (
    by_method,
    cell_marks,
    grads_in_forward,
    group_rows,
    known_methods,
    mark_notes,
    measured,
    one_device,
    present_phases,
    shape_key,
    shape_title,
    status_cell,
    status_label,
    tp_note,
)
from perfsuite.render.roofline import GPU, gpu_for_env, phase_flops, roofline_ms
from perfsuite.units import fmt_bytes, fmt_flops, fmt_number

LOWER_BOUND = "lower bound"


@dataclass
class Cell:
    number: str = ""  # without its unit ("-": none measured)
    unit: str = ""
    marks: str = ""
    value: float | None = None  # what "best" compares (lower is better)
    best: bool = False
    comparable: bool = True  # ‡ fwd/bwd split or † interpreted time: never "best"
    style: str = ""  # the console's: "dim" for a ‡ split, "red" for a wrong cell
    status: dict[str, Any] | None = None  # the row of a cell without numbers

    @property
    def text(self) -> str:
        """The report's: the number with its unit and marks, or the status in full."""
        if self.status is not None:
            return status_label(self.status)
        unit = f" {self.unit}" if self.unit and self.number not in ("", "-") else ""
        return f"{self.number}{unit}{self.marks}"

    def console(self) -> str:
        """The console's: the number and marks in the cell's style, or the short status."""
        if self.status is not None:
            return status_cell(self.status)
        text = self.number + self.marks
        return f"[{self.style}]{text}[/{self.style}]" if self.style else text


@dataclass
class Line:
    method: str  # or LOWER_BOUND
    cells: list[Cell]  # per phase: memory, time, analytic
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # phase -> row


def method_line(
    name: str,
    by_phase: dict[str, dict[str, Any]],
    phases: list[str],
    key: tuple,
    gpu: GPU | None,
    known: dict[str, Any],
    beta: float,
) -> Line:
    """One method's cells; the analytic one a share of ``gpu``'s roofline, else a rate."""
    tokens, vocab, hidden, dtype = key[:4]
    in_fwd = grads_in_forward(name, known, beta)
    cells = []
    for phase in phases:
        row = by_phase.get(phase)
        if row is None or not measured(row):
            cells += [Cell(status=row), Cell(), Cell()]
            continue
        marks = cell_marks(row, phase, in_fwd)
        fair = not marks  # ‡: fwd/bwd split not comparable; †: interpreted; ✗: wrong
        split_ok = not (in_fwd and phase != "fwd+bwd") and row["status"] == "ok"
        style = "red" if row["status"] == "wrong" else "" if split_ok else "dim"  # ‡
        ms = row.get("median_ms")
        analytic = Cell()
        # A ‡ method's fwd/bwd does other work than the phase's FLOPs count: no rate.
        if ms and split_ok:
            if gpu is not None:
                frac = roofline_ms(phase, tokens, vocab, hidden, dtype, gpu) / ms
                analytic = Cell(f"{100 * frac:.0f}%", marks=marks, value=-frac, comparable=fair)
            else:
                rate = phase_flops(phase, tokens, vocab, hidden) / (ms / 1e3)
                analytic = Cell(fmt_flops(rate) + "/s", marks=marks, value=-rate, comparable=fair)
        peak = row.get("peak_bytes")
        cells += [
            Cell(fmt_bytes(peak, "MiB"), "MiB", "", peak, comparable=split_ok, style=style),
            Cell(fmt_number(ms), "ms", marks, ms, comparable=fair, style=style),
            analytic,
        ]
    return Line(name, cells, dict(by_phase))


def bound_line(phases: list[str], key: tuple, gpu: GPU | None) -> Line:
    """The lower bound's cells: docs/math.md's floor, ``gpu``'s roofline time, the FLOPs."""
    tokens, vocab, hidden, dtype = key[:4]
    cells = []
    for phase in phases:
        roof = roofline_ms(phase, tokens, vocab, hidden, dtype, gpu) if gpu else None
        cells += [
            Cell(fmt_bytes(floor_bytes(phase, tokens, vocab, hidden, dtype), "MiB"), "MiB"),
            Cell("" if roof is None else f"{roof:.3g}", "ms"),
            Cell(fmt_flops(phase_flops(phase, tokens, vocab, hidden))),
        ]
    return Line(LOWER_BOUND, cells)


@dataclass
class Section:
    beta: float
    lines: list[Line]
    entropy: float | None = None


@dataclass
class PaperTable:
    title: str
    key: tuple  # (N, V, D, dtype, softcap, workload)
    phases: list[str]
    analytic: str  # header of each phase's third column
    sections: list[Section]
    notes: list[str]  # the mean entropies', then each failed cell's reason
    gpu: GPU | None
    first: dict[str, Any]  # the table's first row: its shape's name, title and device


def mean(values: list[float | None]) -> float | None:
    """The mean of the numbers among ``values`` (None and NaN left out)."""
    values = [v for v in values if v is not None and v == v]
    return statistics.fmean(values) if values else None


def _mark_best(lines: list[Line]) -> None:
    """Bold the lowest value of each column among comparable measured cells."""
    methods = [line for line in lines if line.method != LOWER_BOUND]
    for column in zip(*(line.cells for line in methods), strict=True):
        candidates = [c for c in column if c.value is not None and c.comparable]
        if not candidates:
            continue
        # Best is what the reader sees: every cell that prints as the lowest does (five
        # rows that all print 1.17 MiB are all best, not the one a few bytes lower).
        shown = min(candidates, key=lambda c: c.value).text
        for c in candidates:
            c.best = c.text == shown


def build_report(document: dict[str, Any]) -> list[PaperTable]:
    """The paper tables of a results document, format-independent."""
    rows, env = document["rows"], document["env"]
    gpu = gpu_for_env(env)
    known = known_methods(document)  # the file's record: no torch
    tables = []
    for key, members in group_rows(one_device(rows), key=shape_key).items():
        phases = present_phases(members)
        sections = []
        betas = group_rows(members, key=lambda r: r["beta"])
        for beta in sorted(betas):  # β = 0 first, as the console table and the plan
            lines = [bound_line(phases, key, gpu)]
            for name, by_phase in by_method(betas[beta]).items():
                lines.append(method_line(name, by_phase, phases, key, gpu, known, beta))
            _mark_best(lines)
            entropy = mean([r.get("entropy") for r in betas[beta]])
            sections.append(Section(beta, lines, entropy))
        failed = (r for r in members if r["status"] != "ok" and r.get("reason"))
        reasons = group_rows(
            failed, key=lambda r: (r["method"], r["beta"], status_label(r), r["reason"])
        )
        entropies = [
            f"β={s.beta:g}: {s.entropy:.2f} nats" for s in sections if s.entropy is not None
        ]
        notes = ["inputs' mean token entropy " + ", ".join(entropies)] if entropies else []
        notes += [
            f"{method} β={beta:g} ({', '.join(r['phase'] for r in rows)}): {label}: {reason}"
            for (method, beta, label, reason), rows in reasons.items()
        ]
        analytic = "% roofline" if gpu else "FLOP/s"
        where = gpu.name if gpu else (env.get("device") or {}).get("name")
        title = f"{shape_title(members)} on {where or members[0].get('device', '?')}"
        tables.append(PaperTable(title, key, phases, analytic, sections, notes, gpu, members[0]))
    return tables


def general_notes(document: dict[str, Any], tables: list[PaperTable]) -> list[str]:
    notes = footnotes(document["rows"], known_methods(document))
    gpu = tables[0].gpu if tables else None
    notes.append(
        "lower bound: docs/math.md's memory floor (N fp32 losses for fwd; dE + dC in the input "
        "dtype with a backward) and the FLOPs of each phase (2NVD fwd, 6NVD bwd without "
        "stored logits, 8NVD fwd+bwd)."
    )
    if gpu is not None:
        peaks = ", ".join(f"{d} {t:g}" for d, t in gpu.tflops.items())
        notes.append(
            f"roofline on {gpu.name} (datasheet, dense): max(FLOPs / peak, bytes / "
            f"{gpu.hbm_tb_s:g} TB/s) with peaks {peaks} TFLOP/s; % roofline = roofline time / "
            "measured median (filtering can beat 100%)."
        )
    else:
        notes.append(
            "FLOP/s: the phase's FLOPs over the measured median (no roofline: not a known GPU)."
        )
    notes.append(
        "Bold: the best of its column as printed (ties all bold); times and rates leave ‡ and "
        "† cells out, memory leaves out ‡ fwd/bwd cells. Times are medians."
    )
    return notes


def loss_grids(rows: Iterable[dict[str, Any]]) -> list[Grid]:
    """The console's ``build_report``: a table per β section of each phase's memory and time
    (units in the headers), reasons numbered in a note column; too wide, a phase at a time."""
    grids = []
    for table in build_report({"rows": list(rows), "env": {}}):  # no GPU: no roofline
        head = shape_title([table.first])
        for section in table.sections:
            notes, cells = Notes(), []
            for line in section.lines:
                failed = [
                    r for p in table.phases if (r := line.rows.get(p)) and r["status"] != "ok"
                ]
                why = (notes.ref(f"{r['status']}: {r['reason']}", line.method) for r in failed)
                bound = line.method == LOWER_BOUND
                name = f"[italic]{LOWER_BOUND}[/italic]" if bound else line.method
                shown = (c.console() for i, c in enumerate(line.cells) if i % 3 < 2)
                cells.append([name, *shown, " ".join(dict.fromkeys(why))])
            columns = [Column("method")]
            units = ("MiB", "ms")
            columns += [Column(f"{p}\n{u}", "right", False) for p in table.phases for u in units]
            note = [len(columns)] if notes else []
            columns += [Column("note", fold=False)] if note else []
            cells = [row[: len(columns)] for row in cells]  # the note column only with notes
            title = f"{head}, β={section.beta:g} on {table.first.get('device', '?')}"
            parts = [(f"{title}, {p}", [0, 2 * i + 1, 2 * i + 2, *note])
                     for i, p in enumerate(table.phases)]  # fmt: skip
            box = {**BOX, "sections": [0]}  # a rule under the lower bound
            grids.append(Grid(columns, cells, title, notes.lines(), box, parts[1:] and parts))
    return grids


def footnotes(rows: list[dict[str, Any]], known: dict[str, Any] | None = None) -> list[str]:
    """The notes under the one-device tables; ``known``: the methods (default: the registry's)."""
    notes = [
        "MiB: peak memory of the phase above what was allocated when it started; "
        "ms: median time; lower bound: docs/math.md's floor (N fp32 losses; dE + dC)."
    ]
    notes += mark_notes(one_device(rows), known)
    return notes + ([tp_note(rows)] if tp_note(rows) else [])


def print_tables(rows: list[dict[str, Any]], console: Console | None = None) -> None:
    """The one-device tables and their notes (``tp_table`` prints those across ranks)."""
    console = console or TrimmedConsole()
    for i, grid in enumerate(loss_grids(rows)):
        if i:  # the next table's title was the line after the last one's notes
            console.print()
        grid.print(console)
    for note in footnotes(rows) if one_device(rows) else [tp_note(rows)] if rows else []:
        console.print(note, style="dim")
