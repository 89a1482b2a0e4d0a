"""A results row (``Row``, whose fields the schema's models are derived from) and the kinds
of cell: statuses, phases, dtypes, a cell's identity, each kind's own metrics (nested
under ``metrics`` on disk). Apart from the schema, so that writing rows never imports
pydantic."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any


class ResultsError(ValueError):
    """A results file that cannot be read: missing, corrupt, truncated or of another schema."""


SCHEMA_VERSION = 2  # what ``new_document`` writes
READS = (1, 2)  # what ``load_results`` reads

# One device's loss, the loss across ranks (``run --tp``), a training step (``perfsuite
# step``) and a training run (``perfsuite converge``); the first three are timed.
KINDS = ("loss", "tp", "step", "train")
TIMED_KINDS = frozenset(KINDS[:3])

# ``skipped``: a sweep predicted the cell cannot fit the device and did not attempt it.
STATUSES = ("ok", "wrong", "oom", "unsupported", "unavailable", "error", "skipped")
# Statuses of a cell that was measured (``wrong``: timed, though it failed the gate).
MEASURED = ("ok", "wrong")
DTYPES = ("fp32", "bf16", "fp16")
# How a cell's samples were timed (perfsuite.measure.timers): events around each call
# (every cell before --timer), one CUDA graph replay each, or the device kernels' sum.
TIMERS = ("events", "graph", "kernels")
# A loss cell's phases; a training step's (model forward, backward, AdamW, the whole: its
# "step(...)" workload keeps its cells apart); a training run is one cell.
PHASES = ("fwd", "bwd", "fwd+bwd")
STEP_PHASES = ("fwd", "bwd", "opt", "step")
TRAIN_PHASES = ("train",)

# The columns that identify a cell: two rows with equal keys measure the same thing.
CELL_KEY = ("method", "tokens", "vocab", "hidden", "dtype", "beta", "softcap", "phase")


@dataclass
class Row:
    """One cell: method x shape x dtype x beta x phase. Times in ms; None: not measured."""

    method: str
    tokens: int
    vocab: int
    hidden: int
    dtype: str
    beta: float
    phase: str
    status: str
    reason: str = ""
    softcap: float | None = None
    shape: str = ""  # preset name, or "custom"
    device: str = "cpu"
    median_ms: float | None = None
    p20_ms: float | None = None
    p80_ms: float | None = None
    samples_ms: list[float] = field(default_factory=list)
    # Triton kernels run by the interpreter on CPU: timings meaningless for GPUs.
    interpreted: bool = False
    # First call (compilation, autotuning, caches) of the fwd+bwd step.
    compile_ms: float | None = None
    # Peak tensor memory above what the phase started with (the paper's figure), the
    # absolute peak (allocator on CUDA, RSS on CPU), and on CPU the RSS growth at its peak.
    peak_bytes: int | None = None
    peak_abs_bytes: int | None = None
    rss_peak_bytes: int | None = None
    # Errors against the fp32 reference (loss, dE, dC; max absolute) and the gate's
    # tolerance for each.
    max_abs_err: float | None = None
    loss_err: float | None = None
    grad_e_err: float | None = None
    grad_c_err: float | None = None
    tolerance: dict[str, float] | None = None
    # The inputs (perfsuite.plan.workloads) and their mean token entropy (nats).
    workload: str = "random"
    entropy: float | None = None
    # Two fwd+bwd calls gave the same bits; None when not measured (the interpreter).
    deterministic: bool | None = None
    # Why the machine was busy while measuring ("" when quiet; perfsuite.measure.machine).
    busy: str = ""
    # On CUDA, the GPU's SM clock, power and throttling while the samples ran
    # (perfsuite.measure.clocks; None where not watched).
    clocks: dict[str, Any] | None = None
    # ``run --tp``: ranks the classifier is sharded over, part of the cell's identity
    # (None: one device); per call of the phase, one rank's collectives, their bytes, and
    # their time on the slowest rank.
    tp: int | None = None
    collectives: int | None = None
    collective_bytes: int | None = None
    collective_ms: float | None = None
    # ``step`` rows: the loss's share of the step (its fwd+bwd less a trivial loss's).
    loss_ms: float | None = None
    # How the samples were timed (``measure.timers.TIMERS``): part of the cell's identity.
    timer: str = "events"
    # ``--profile``: one profiled call's breakdown and its trace's file name.
    breakdown: dict[str, Any] | None = None
    trace: str | None = None
    # The kind of cell that made the row (``KINDS``), stamped when it is made.
    kind: str = field(kw_only=True)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r} not one of {KINDS}")
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} not one of {STATUSES}")
        if self.phase not in PHASES and self.phase not in STEP_PHASES:
            raise ValueError(f"phase {self.phase!r} not one of {PHASES} or {STEP_PHASES}")


def cell_key(row: dict[str, Any]) -> tuple:
    """What makes two rows the same measurement: ``CELL_KEY``, the workload, the TP size
    (None: one device) and the timer (``events`` before ``--timer``)."""
    return (
        *(row.get(k) for k in CELL_KEY),
        row.get("workload") or "random",
        row.get("tp"),
        row.get("timer") or "events",
    )


def describe_cell(row: dict[str, Any]) -> str:
    """``ours TP=2 N=8192 V=256000 D=2304 bf16 β=0 fwd``, and the workload unless random."""
    tp = "" if row.get("tp") is None else f" TP={row['tp']}"
    workload = "" if (row.get("workload") or "random") == "random" else f" {row['workload']}"
    what = f"{row['method']}{tp} N={row['tokens']} V={row['vocab']} D={row['hidden']}"
    return f"{what} {row['dtype']} β={row['beta']:g} {row['phase']}{workload}"


def document_kinds(document: dict[str, Any]) -> set[str]:
    """Every kind of row in a document in memory."""
    return {row["kind"] for row in document["rows"]}


def _either(kinds: Iterable[str]) -> str:
    names = sorted(kinds, key=lambda k: (KINDS.index(k) if k in KINDS else len(KINDS), k))
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def require_kind(
    document: dict[str, Any], path: str | os.PathLike[str], allowed: Collection[str], command: str
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
KIND_ONLY = {k for fields in (*METRICS.values(), *OWN_FIELDS.values()) for k in fields}


def to_disk_row(row: dict[str, Any]) -> dict[str, Any]:
    """A flat row as version 2 writes it: its kind first, its kind's metrics nested.
    Another kind's field is dropped when empty and kept otherwise, for the reader to
    refuse: a writer's mistake shows, and no measured value is thrown away."""
    kind = row["kind"]
    out: dict[str, Any] = {"kind": kind}
    metrics = {k: row.get(k) for k in METRICS.get(kind, ())}
    for key, value in row.items():
        empty_other = key in KIND_ONLY and key not in OWN_FIELDS.get(kind, ()) and value is None
        if key != "kind" and key not in metrics and not empty_other:
            out[key] = value
    if metrics:
        out["metrics"] = metrics
    return out


def to_disk(document: dict[str, Any]) -> dict[str, Any]:
    """The version 2 document as written: rows nested (``to_disk_row``)."""
    return {**document, "rows": [to_disk_row(r) for r in document["rows"]]}


def flat_row(row: dict[str, Any]) -> dict[str, Any]:
    """A version 2 row as readers use it: ``metrics`` lifted to the top."""
    return {**{k: v for k, v in row.items() if k != "metrics"}, **(row.get("metrics") or {})}
