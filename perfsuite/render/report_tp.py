"""Cells measured across ranks (``run --tp``) in ``perfsuite report``: the console's TP
tables (``tp_table``) as markdown, and one CSV record per (shape, β, method, TP size).

A TP record's numbers are per rank, as the TP table's: ``mem_mib`` the largest rank's
peak, ``ms`` the step's median (the slowest rank's, step by step), ``floor_mib`` the
per-rank floor (⌈V/K⌉ rows of C), ``gflop`` and ``achieved_tflop_s`` a 1/K share of the
phase's FLOPs (times ``tp`` for all ranks), plus the collectives per call; the roofline
columns stay blank (no model of the interconnect). LaTeX and HTML leave TP cells out,
with a note.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from perfsuite.plan.registry import tp_methods
from perfsuite.render.roofline import phase_flops
from perfsuite.render.table import (
    cell_marks,
    grads_in_forward,
    group_rows,
    measured,
    shape_key,
    status_label,
)
from perfsuite.render.tp_table import (
    COLUMNS,
    TpTable,
    rank_floor,
    tp_footnotes,
    tp_rows,
    tp_tables,
)

# Per phase, after report_csv.PER_PHASE, in a document with TP cells.
TP_PER_PHASE = ("collectives", "collective_mib", "collective_ms")


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_tp_table(table: TpTable) -> str:
    """One pipe table: every column (no terminal to fit), the notes' numbers last."""
    keys = [key for key, _ in COLUMNS]
    data = [[_md_escape(line.cells.get(k, "")) for k in keys] for line in table.lines]
    headers = [table.headers[k] for k in keys]
    if any(line.refs for line in table.lines):
        headers.append("note")
        for values, line in zip(data, table.lines, strict=True):
            values.append(line.refs)
    frame = pd.DataFrame(data, columns=headers)
    align = ("left",) + ("right",) * (len(headers) - 1)
    return frame.to_markdown(index=False, colalign=align, disable_numparse=True)


def tp_markdown(document: dict[str, Any]) -> list[str]:
    """The TP tables of ``document`` as markdown lines (none without a TP cell)."""
    tables = tp_tables(document["rows"])
    out = []
    for table in tables:
        out.append(f"### {_md_escape(table.title)}\n")
        out.append(markdown_tp_table(table))
        out.append("")
        if table.notes:
            out.extend([*(f"- {_md_escape(n)}" for n in table.notes), ""])
    out.extend(f"{_md_escape(n)}  " for n in tp_footnotes(tables, document["rows"]))
    return out


def _slug(phase: str) -> str:
    return phase.replace("+", "")


def _phase_fields(row: dict[str, Any], phase: str, marks: str) -> dict[str, Any]:
    """The ``<phase>_*`` columns of one TP cell, per rank."""
    s, k = _slug(phase), row["tp"]
    flops = phase_flops(phase, row["tokens"], row["vocab"], row["hidden"]) / k
    out: dict[str, Any] = {
        f"{s}_status": status_label(row),
        f"{s}_marks": marks,
        f"{s}_floor_mib": f"{rank_floor(phase, row) / 2**20:.6g}",
        f"{s}_gflop": f"{flops / 1e9:.6g}",
    }
    if not measured(row):
        return out
    if row.get("peak_bytes") is not None:
        out[f"{s}_mem_mib"] = f"{row['peak_bytes'] / 2**20:.6g}"
    for f in ("median_ms", "p20_ms", "p80_ms"):
        if row.get(f) is not None:
            out[f"{s}_{'ms' if f == 'median_ms' else f}"] = f"{row[f]:.6g}"
    if row.get("median_ms"):
        out[f"{s}_achieved_tflop_s"] = f"{flops / (row['median_ms'] / 1e3) / 1e12:.6g}"
    if row.get("collectives") is not None:
        out[f"{s}_collectives"] = str(row["collectives"])
    if row.get("collective_bytes") is not None:
        out[f"{s}_collective_mib"] = f"{row['collective_bytes'] / 2**20:.6g}"
    if row.get("collective_ms") is not None:
        out[f"{s}_collective_ms"] = f"{row['collective_ms']:.6g}"
    return out


def _mean(values: list[Any]) -> float | None:
    values = [v for v in values if v is not None and v == v]
    return sum(values) / len(values) if values else None


def tp_records(document: dict[str, Any]) -> list[dict[str, Any]]:
    """One CSV record per (shape, β, method, TP size) of ``document``'s TP cells."""
    known = tp_methods()  # the methods across ranks: their own capabilities
    order = {m: i for i, m in enumerate(dict.fromkeys(r["method"] for r in document["rows"]))}
    records = []
    for key, members in group_rows(tp_rows(document["rows"]), key=shape_key).items():
        tokens, vocab, hidden, dtype, softcap, workload = key
        for beta, rows in sorted(group_rows(members, key=lambda r: r["beta"]).items()):
            entropy = _mean([r.get("entropy") for r in rows])
            cells = group_rows(rows, key=lambda r: (r["method"], r["tp"]))
            for (method, tp), phases in sorted(
                cells.items(), key=lambda c: (order[c[0][0]], c[0][1])
            ):
                seen = {r.get("deterministic") for r in phases} - {None}
                out: dict[str, Any] = {
                    "shape": phases[0].get("shape") or "custom",
                    "tokens": tokens,
                    "vocab": vocab,
                    "hidden": hidden,
                    "dtype": dtype,
                    "softcap": "" if softcap is None else softcap,
                    "workload": workload,
                    "entropy_nats": "" if entropy is None else f"{entropy:.4f}",
                    "device": phases[0].get("device", "?"),
                    "gpu": "",
                    "beta": beta,
                    "method": method,
                    "tp": tp,
                    "deterministic": "" if not seen else ("yes" if seen == {True} else "no"),
                    "best": "",
                }
                in_fwd = grads_in_forward(method, known, beta)
                for row in phases:
                    marks = cell_marks(row, row["phase"], in_fwd) if measured(row) else ""
                    out.update(_phase_fields(row, row["phase"], marks))
                records.append(out)
    return records
