"""The kinds of cell a results row can measure: their statuses, phases and dtypes, what
identifies a cell, what only one kind records (nested under ``metrics`` in version 2
files), and a reader's refusal of the kinds it cannot read, in one line.

Kept apart from the schema (``perfsuite.results.schema``) so that writing rows never
imports pydantic: plain functions over the flat row dicts that readers and writers use.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any


class ResultsError(ValueError):
    """A results file that cannot be read: missing, corrupt, truncated or of another schema."""


SCHEMA_VERSION = 2  # what ``new_document`` writes
READS = (1, 2)  # what ``load_results`` reads

# The kinds of cell: one device's loss, the loss across ranks (``run --tp``), a whole
# training step (``perfsuite step``) and a training run (``perfsuite converge``).
KINDS = ("loss", "tp", "step", "train")

# ``skipped``: a sweep predicted the cell cannot fit the device and did not attempt it.
STATUSES = ("ok", "wrong", "oom", "unsupported", "unavailable", "error", "skipped")
# Statuses of a cell that was measured (``wrong``: timed, though it failed the gate).
MEASURED = ("ok", "wrong")
DTYPES = ("fp32", "bf16", "fp16")
# How a cell's samples were timed (perfsuite.measure.timers): events around each call
# (every cell before --timer), one CUDA graph replay each, or the device kernels' sum.
TIMERS = ("events", "graph", "kernels")
# A loss cell's phases (one device or across ranks).
PHASES = ("fwd", "bwd", "fwd+bwd")
# ``perfsuite step``: one training step (model forward, backward, AdamW) and its whole;
# its rows carry a "step(...)" workload, so they never share a cell with the above.
STEP_PHASES = ("fwd", "bwd", "opt", "step")
# ``perfsuite converge``: a whole training run is one cell.
TRAIN_PHASES = ("train",)
KIND_PHASES = {"loss": PHASES, "tp": PHASES, "step": STEP_PHASES, "train": TRAIN_PHASES}

# The columns that identify a cell: two rows with equal keys measure the same thing.
CELL_KEY = ("method", "tokens", "vocab", "hidden", "dtype", "beta", "softcap", "phase")


def cell_key(row: dict[str, Any]) -> tuple:
    """``CELL_KEY`` plus the workload, the TP size (None: one device, the only kind
    before ``--tp``) and the timer (``events`` before ``--timer``): what makes two rows
    the same measurement."""
    return (
        *(row.get(k) for k in CELL_KEY),
        row.get("workload") or "random",
        row.get("tp"),
        row.get("timer") or "events",
    )


def row_kind(row: dict[str, Any]) -> str:
    """The row's kind: its ``kind`` key (every row read through ``load_results`` has one),
    else what a version 1 row says by its fields: a ``step(...)`` workload, a TP size."""
    kind = row.get("kind")
    if isinstance(kind, str) and kind:
        return kind
    if str(row.get("workload") or "").startswith("step("):
        return "step"
    if row.get("tp") is not None:
        return "tp"
    return "loss"


def document_kinds(document: dict[str, Any]) -> set[str]:
    """Every kind of row in a document (empty for a document without rows)."""
    return {row_kind(row) for row in document.get("rows") or () if isinstance(row, dict)}


def _either(kinds: Iterable[str]) -> str:
    names = sorted(kinds, key=lambda k: (KINDS.index(k) if k in KINDS else len(KINDS), k))
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def require_kind(
    document: dict[str, Any],
    path: str | os.PathLike[str],
    allowed: set[str] | frozenset[str],
    command: str,
) -> None:
    """Raise ``ResultsError`` (one line) if ``document`` holds rows of a kind ``command``
    cannot read, e.g. ``run.json holds step rows; report takes loss or tp rows``."""
    other = document_kinds(document) - set(allowed)
    if other:
        raise ResultsError(
            f"{path} holds {_either(other)} rows; {command} takes {_either(allowed)} rows"
        )


# What only one kind measures, nested under ``metrics`` on disk (version 2).
METRICS = {
    "loss": (),
    "tp": ("collectives", "collective_bytes", "collective_ms"),
    "step": ("loss_ms",),
    "train": ("steps", "heldout", "parity", "wall_s"),
}
# Top-level fields that only one kind has.
OWN_FIELDS = {"tp": ("tp",)}
_KIND_ONLY = {k for fields in (*METRICS.values(), *OWN_FIELDS.values()) for k in fields}


def to_disk_row(row: dict[str, Any]) -> dict[str, Any]:
    """A flat row as version 2 writes it: its kind first, its kind's metrics nested.
    Another kind's field is dropped when empty and kept otherwise, for the reader to
    refuse: a writer's mistake shows, and no measured value is thrown away."""
    kind = row_kind(row)
    out: dict[str, Any] = {"kind": kind}
    metrics = {k: row.get(k) for k in METRICS.get(kind, ())}
    for key, value in row.items():
        if key == "kind" or key in metrics:
            continue
        if key in _KIND_ONLY and key not in OWN_FIELDS.get(kind, ()) and value is None:
            continue
        out[key] = value
    if metrics:
        out["metrics"] = metrics
    return out


def to_disk(document: dict[str, Any]) -> dict[str, Any]:
    """The version 2 document as written: rows nested (``to_disk_row``)."""
    return {**document, "rows": [to_disk_row(r) for r in document["rows"]]}


def flat_row(row: dict[str, Any]) -> dict[str, Any]:
    """A version 2 row as readers use it: ``metrics`` lifted to the top."""
    out = {k: v for k, v in row.items() if k != "metrics"}
    out.update(row.get("metrics") or {})
    return out
