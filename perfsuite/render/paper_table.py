"""The paper's table as data, independent of format: per shape a table of β sections,
the lower bound, then a line per method of memory, time and an analytic column per phase,
the best of each column marked. One-device cells only (``tp_table`` has the others)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfsuite.render.roofline import GPU, gpu_for_env
from perfsuite.render.table import (
    LOWER_BOUND,
    Line,
    bound_line,
    by_method,
    footnotes,
    group_rows,
    known_methods,
    method_line,
    one_device,
    present_phases,
    shape_key,
    shape_title,
    status_label,
)


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
    notes: list[str]
    gpu: GPU | None
    shape: str = ""
    device: str = ""


def mean(values: list[float | None]) -> float | None:
    """The mean of the numbers among ``values`` (None and NaN left out)."""
    values = [v for v in values if v is not None and v == v]
    return sum(values) / len(values) if values else None


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
        notes = [
            f"{method} β={beta:g} ({', '.join(r['phase'] for r in rows)}): {label}: {reason}"
            for (method, beta, label, reason), rows in reasons.items()
        ]
        analytic = "% roofline" if gpu else "FLOP/s"
        device = members[0].get("device", "?")
        where = gpu.name if gpu else (env.get("device") or {}).get("name") or device
        title, shape = f"{shape_title(members)} on {where}", members[0].get("shape") or "custom"
        tables.append(PaperTable(title, key, phases, analytic, sections, notes, gpu, shape, device))
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
        "† cells out, memory "
        "leaves out ‡ fwd/bwd cells. Times are medians."
    )
    return notes


def entropy_note(table: PaperTable) -> str:
    parts = [f"β={s.beta:g}: {s.entropy:.2f} nats" for s in table.sections if s.entropy is not None]
    return "inputs' mean token entropy " + ", ".join(parts) if parts else ""
