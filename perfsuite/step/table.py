"""``perfsuite step``'s console tables: one per model x dtype x β, a line per method, fitted
to the terminal; reasons go in numbered notes under the table."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console

from perfsuite.fit import Column, Grid, Notes, TrimmedConsole
from perfsuite.render.cells import (
    by_method,
    cell_marks,
    group_rows,
    mark_notes,
    measured,
    status_cell,
)
from perfsuite.units import fmt_bytes, fmt_number

PHASE_COLUMNS = ("fwd", "bwd", "opt", "step")
# A first step this many times a measured one was mostly compilation: said in a note.
COMPILE_NOTE_RATIO = 10.0


def _line(method: str, phases: dict[str, dict], notes: Notes) -> list[str]:
    step = phases.get("step") or next(iter(phases.values()))
    timed = measured(step)
    refs = []
    if step["status"] != "ok" or (step.get("reason") and not step.get("interpreted")):
        refs.append(notes.ref(f"{step['status']}: {step['reason']}", method))
    compile_ms, median = step.get("compile_ms"), step.get("median_ms")
    if timed and compile_ms and median and compile_ms > COMPILE_NOTE_RATIO * median:
        first = f"first step {compile_ms / 1e3:,.1f} s (compilation, measured once: not a sample)"
        refs.append(notes.ref(first, method))
    note = " ".join([cell_marks(step, "step", False) if timed else "", *refs]).strip()
    if not timed:
        return [method, status_cell(step), "", "", "", "", "", "", note]
    loss_ms = step.get("loss_ms")  # the loss's share of the step, when measured
    cells = [fmt_number(phases.get(p, {}).get("median_ms")) for p in PHASE_COLUMNS]
    cells += [
        fmt_number(step["tokens"] / (median / 1e3) if median else None),
        fmt_bytes(step.get("peak_bytes"), "MiB"),
        "-" if loss_ms is None or not median else f"{100 * min(loss_ms / median, 1.0):.0f}",
    ]
    if step["status"] == "wrong":
        cells = [f"[red]{c}[/red]" for c in cells]
    return [method, *cells, note]


COLUMNS = [
    Column("method"),
    *(Column(f"{p}\nms", "right", False) for p in PHASE_COLUMNS),
    *(Column(h, "right", False) for h in ("tok/s", "peak\nMiB", "loss\n%")),
    Column("note", fold=False),
]


def title(first: dict[str, Any]) -> str:
    shape, workload, dtype, beta, device = _key(first)
    cap = "" if first.get("softcap") is None else f", softcap {first['softcap']:g}"
    return (
        f"{shape} {workload}: N={first['tokens']} V={first['vocab']} D={first['hidden']} "
        f"{dtype}{cap}, β={beta:g} on {device}"
    )


def _key(row: dict[str, Any]) -> tuple:
    """One table: (model, workload, dtype, β, device)."""
    return (row["shape"], row["workload"], row["dtype"], row["beta"], row.get("device"))


def print_step_tables(rows: list[dict[str, Any]], console: Console | None = None) -> None:
    """Every table, its numbered notes, then what the columns and marks mean."""
    console = console or TrimmedConsole()
    for members in group_rows(rows, key=_key).values():
        notes = Notes()
        lines = [_line(m, phases, notes) for m, phases in by_method(members).items()]
        options = dict(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
        Grid(COLUMNS, lines, title(members[0]), notes.lines(), options).print(console)
    for note in footnotes(rows):
        console.print(note, style="dim", markup=False, highlight=False)


def footnotes(rows: list[dict[str, Any]]) -> list[str]:
    """What the columns mean, and each mark the rows carry."""
    if not rows:
        return []
    out = [
        "ms: median per step phase (fwd: model and loss; bwd; opt: AdamW step and "
        "zero_grad); tok/s: batch x seq per step; peak: tensor memory over the step above "
        "the weights and AdamW state; loss %: the loss's share of the step, measured "
        "against a trivial loss (docs/step.md)."
    ]
    out += mark_notes([r for r in rows if measured(r)], kind="step")
    if any(r.get("device") == "cpu" for r in rows):
        out.append(
            "CPU run: a CPU step says how the losses compare in memory and in arithmetic "
            "there, not what a GPU step costs; process RSS is in the results file."
        )
    return out
