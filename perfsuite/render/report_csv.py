"""The paper's table as CSV for other tools: one line per (table, β, method), every
number spelled out in its own column (status, memory, time quantiles, marks,
floor, FLOPs, roofline), written by ``DataFrame.to_csv``. Cells measured across ranks
follow, one line per (table, β, method, TP size) with ``tp`` set and their numbers
per rank (``report_tp``); ``tp`` is blank on one-device lines."""

from __future__ import annotations

from typing import Any

import pandas as pd

from perfsuite.plan.memory_model import floor_bytes
from perfsuite.plan.registry import all_methods
from perfsuite.render.paper_table import LOWER_BOUND, PaperTable, Section, build_report
from perfsuite.render.report_tp import TP_PER_PHASE, tp_records
from perfsuite.render.roofline import phase_flops, roofline_ms
from perfsuite.render.table import cell_marks, grads_in_forward, measured, status_label

PER_PHASE = (
    "status",
    "mem_mib",
    "ms",
    "p20_ms",
    "p80_ms",
    "marks",
    "floor_mib",
    "gflop",
    "roofline_ms",
    "roofline_frac",
    "achieved_tflop_s",
)
LEADING = (
    "shape",
    "tokens",
    "vocab",
    "hidden",
    "dtype",
    "softcap",
    "workload",
    "entropy_nats",
    "device",
    "gpu",
    "beta",
    "method",
    "tp",
    "deterministic",
)


def _slug(phase: str) -> str:
    return phase.replace("+", "")


def _phase_fields(table: PaperTable, phase: str, row: dict[str, Any] | None, marks: str) -> dict:
    """The ``<phase>_*`` columns of one line."""
    tokens, vocab, hidden, dtype = table.key[:4]
    s = _slug(phase)
    flops = phase_flops(phase, tokens, vocab, hidden)
    roof = roofline_ms(phase, tokens, vocab, hidden, dtype, table.gpu) if table.gpu else None
    out: dict[str, Any] = {
        f"{s}_floor_mib": f"{floor_bytes(phase, tokens, vocab, hidden, dtype) / 2**20:.6g}",
        f"{s}_gflop": f"{flops / 1e9:.6g}",
        f"{s}_roofline_ms": "" if roof is None else f"{roof:.6g}",
    }
    if row is None:
        return out
    out[f"{s}_status"] = status_label(row)
    out[f"{s}_marks"] = marks
    if not measured(row):
        return out
    if row.get("peak_bytes") is not None:
        out[f"{s}_mem_mib"] = f"{row['peak_bytes'] / 2**20:.6g}"
    for f in ("median_ms", "p20_ms", "p80_ms"):
        if row.get(f) is not None:
            out[f"{s}_{'ms' if f == 'median_ms' else f}"] = f"{row[f]:.6g}"
    ms = row.get("median_ms")
    if ms:
        out[f"{s}_achieved_tflop_s"] = f"{flops / (ms / 1e3) / 1e12:.6g}"
        if roof is not None:
            out[f"{s}_roofline_frac"] = f"{roof / ms:.4f}"
    return out


def _determinism(rows: Any) -> str:
    seen = {r.get("deterministic") for r in rows} - {None}
    return "" if not seen else ("yes" if seen == {True} else "no")


def _records(table: PaperTable, section: Section, known: dict[str, Any]) -> list[dict]:
    tokens, vocab, hidden, dtype, softcap, workload = table.key
    records = []
    for line in section.lines:
        out: dict[str, Any] = {
            "shape": table.shape,
            "tokens": tokens,
            "vocab": vocab,
            "hidden": hidden,
            "dtype": dtype,
            "softcap": "" if softcap is None else softcap,
            "workload": workload,
            "entropy_nats": "" if section.entropy is None else f"{section.entropy:.4f}",
            "device": table.device,
            "gpu": table.gpu.name if table.gpu else "",
            "beta": section.beta,
            "method": "lower_bound" if line.method == LOWER_BOUND else line.method,
            "tp": "",  # one device; report_tp's lines hold the cells across ranks
            # Measured by the worker (two calls, every bit); blank where not measured.
            "deterministic": _determinism(line.rows.values()),
        }
        in_fwd = grads_in_forward(line.method, known, section.beta)
        best = []
        for i, phase in enumerate(table.phases):
            row = line.rows.get(phase)
            marks = cell_marks(row, phase, in_fwd) if row is not None else ""
            out.update(_phase_fields(table, phase, row, marks))
            for j, what in enumerate(("mem", "time", "analytic")):
                if line.cells[3 * i + j].best:
                    best.append(f"{_slug(phase)}_{what}")
        out["best"] = ";".join(best)
        records.append(out)
    return records


def report_frame(document: dict[str, Any]) -> pd.DataFrame:
    """Every line of every paper table of ``document``, one column per number."""
    tables = build_report(document)
    across = tp_records(document)
    present = {r["phase"] for r in document["rows"]} if across else set()
    phases = [
        p for p in ("fwd", "bwd", "fwd+bwd") if p in present or any(p in t.phases for t in tables)
    ]
    fields = PER_PHASE + (TP_PER_PHASE if across else ())
    columns = [*LEADING, *(f"{_slug(p)}_{f}" for p in phases for f in fields), "best"]
    known = all_methods()
    records = [
        record
        for table in tables
        for section in table.sections
        for record in _records(table, section, known)
    ] + across
    return pd.DataFrame.from_records(records, columns=columns).astype(object)


def render_csv(document: dict[str, Any]) -> str:
    return report_frame(document).to_csv(index=False, lineterminator="\n")
