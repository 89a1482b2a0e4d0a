"""The paper's table as CSV for other tools: a line per (table, β, method), every number
in its own column; cells across ranks follow, a line per TP size with ``tp`` set and
their numbers per rank, as the TP tables' (no roofline: no model of the interconnect)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from perfsuite.plan.memory_model import floor_bytes
from perfsuite.plan.registry import methods_for
from perfsuite.render.paper_table import build_report, mean
from perfsuite.render.roofline import GPU, gpu_for_env, phase_flops, roofline_ms
from perfsuite.render.table import (
    LOWER_BOUND,
    cell_marks,
    grads_in_forward,
    group_rows,
    known_methods,
    measured,
    shape_key,
    status_label,
)
from perfsuite.render.tp_table import shard_rows, tp_rows

PER_PHASE = (
    "status", "mem_mib", "ms", "p20_ms", "p80_ms", "marks", "floor_mib", "gflop", "roofline_ms",
    "roofline_frac", "achieved_tflop_s",
)  # fmt: skip
# Per phase, after PER_PHASE, in a document with TP cells: (column, row field, scale).
TP_PER_PHASE = (
    ("collectives", "collectives", 0),
    ("collective_mib", "collective_bytes", 2**20),
    ("collective_ms", "collective_ms", 1),
)
LEADING = (
    "shape", "tokens", "vocab", "hidden", "dtype", "softcap", "workload", "entropy_nats", "device",
    "gpu", "beta", "method", "tp", "deterministic",
)  # fmt: skip


def _slug(phase: str) -> str:
    return phase.replace("+", "")


def _phase_fields(
    phase: str, row: dict[str, Any] | None, in_fwd: bool, key: tuple, gpu: GPU | None
) -> dict[str, Any]:
    """The ``<phase>_*`` columns of one line; a TP cell's per rank (its 1/K share)."""
    tokens, vocab, hidden, dtype = key[:4]
    s, k = _slug(phase), (row or {}).get("tp") or 1
    flops = phase_flops(phase, tokens, vocab, hidden) / k
    floor = floor_bytes(phase, tokens, shard_rows(vocab, k), hidden, dtype)
    roof = roofline_ms(phase, tokens, vocab, hidden, dtype, gpu) if gpu else None
    out: dict[str, Any] = {
        f"{s}_floor_mib": f"{floor / 2**20:.6g}",
        f"{s}_gflop": f"{flops / 1e9:.6g}",
        f"{s}_roofline_ms": "" if roof is None else f"{roof:.6g}",
    }
    if row is None:
        return out
    out[f"{s}_status"] = status_label(row)
    # A cell across ranks carries its marks only where it has numbers (the TP tables').
    one = row.get("tp") is None
    out[f"{s}_marks"] = cell_marks(row, phase, in_fwd) if measured(row) or one else ""
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
    for column, field, scale in TP_PER_PHASE:
        if row.get(field) is not None:
            out[f"{s}_{column}"] = f"{row[field] / scale:.6g}" if scale else str(row[field])
    return out


def _record(
    head: dict[str, Any],
    method: str,
    tp: int | None,
    by_phase: dict[str, dict[str, Any]],
    phases: list[str],
    known: dict[str, Any],
    gpu: GPU | None,
) -> dict[str, Any]:
    """One CSV line: ``head`` (the shape and β), the method's, then per phase its columns."""
    seen = {r.get("deterministic") for r in by_phase.values()} - {None}
    out = {
        **head,
        "method": method,
        "tp": "" if tp is None else tp,
        # Measured by the worker (two calls, every bit); blank where not measured.
        "deterministic": "" if not seen else ("yes" if seen == {True} else "no"),
        "best": "",
    }
    in_fwd = grads_in_forward(method, known, head["beta"])
    key = (head["tokens"], head["vocab"], head["hidden"], head["dtype"])
    for phase in phases:
        out.update(_phase_fields(phase, by_phase.get(phase), in_fwd, key, gpu))
    return out


def _head(key: tuple, first: dict[str, Any], gpu: GPU | None, beta: float, entropy: Any) -> dict:
    softcap = "" if key[4] is None else key[4]
    return {
        "shape": first.get("shape") or "custom",
        **dict(zip(LEADING[1:7], (*key[:4], softcap, key[5]), strict=True)),
        "entropy_nats": "" if entropy is None else f"{entropy:.4f}",
        "device": first.get("device", "?"),
        "gpu": gpu.name if gpu else "",
        "beta": beta,
    }


def _tp_records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (shape, β, method, TP size) of the cells measured across ranks."""
    order = {m: i for i, m in enumerate(dict.fromkeys(r["method"] for r in rows))}
    records = []
    groups = group_rows(tp_rows(rows), key=shape_key)
    # the methods across ranks, their own capabilities: asked only when there are such cells
    known = methods_for("tp") if groups else {}
    for key, members in groups.items():
        for beta, group in sorted(group_rows(members, key=lambda r: r["beta"]).items()):
            entropy = mean([r.get("entropy") for r in group])
            cells = group_rows(group, key=lambda r: (order[r["method"]], r["tp"]))
            for (_, tp), cell in sorted(cells.items()):
                head = _head(key, cell[0], None, beta, entropy)
                by_phase = {r["phase"]: r for r in cell}
                method = cell[0]["method"]
                records.append(_record(head, method, tp, by_phase, list(by_phase), known, None))
    return records


def report_frame(document: dict[str, Any]) -> pd.DataFrame:
    """Every line of every paper table of ``document``, one column per number."""
    tables = build_report(document)
    gpu = gpu_for_env(document["env"])
    known = known_methods(document)
    records = []
    for table in tables:
        for section in table.sections:
            first = {"shape": table.shape, "device": table.device}
            head = _head(table.key, first, gpu, section.beta, section.entropy)
            for line in section.lines:
                name = "lower_bound" if line.method == LOWER_BOUND else line.method
                record = _record(head, name, None, line.rows, table.phases, known, gpu)
                record["best"] = ";".join(
                    f"{_slug(phase)}_{what}"
                    for i, phase in enumerate(table.phases)
                    for j, what in enumerate(("mem", "time", "analytic"))
                    if line.cells[3 * i + j].best
                )
                records.append(record)
    across = _tp_records(document["rows"])
    present = {r["phase"] for r in document["rows"]} if across else set()
    phases = [
        p for p in ("fwd", "bwd", "fwd+bwd") if p in present or any(p in t.phases for t in tables)
    ]
    fields = PER_PHASE + tuple(c for c, _, _ in TP_PER_PHASE if across)
    columns = [*LEADING, *(f"{_slug(p)}_{f}" for p in phases for f in fields), "best"]
    return pd.DataFrame.from_records(records + across, columns=columns).astype(object)


def render_csv(document: dict[str, Any]) -> str:
    return report_frame(document).to_csv(index=False, lineterminator="\n")
