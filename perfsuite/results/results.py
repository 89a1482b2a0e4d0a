"""The results file: one JSON document with provenance and one row per cell.

Its layout (version 2, rows by kind) and the one schema it is read by are in
``perfsuite.results.schema``; this module builds (``Row``, ``new_document``), writes and
reads it. Written atomically (temp file + rename) so an interrupted run never leaves a
truncated file behind; loaded into pandas with one call (``load_dataframe``).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.results.kinds import (  # noqa: F401  (readers and writers import them from here)
    CELL_KEY,
    DTYPES,
    KINDS,
    MEASURED,
    PHASES,
    READS,
    SCHEMA_VERSION,
    STATUSES,
    STEP_PHASES,
    ResultsError,
    document_kinds,
    require_kind,
    row_kind,
    to_disk,
)
from perfsuite.results.outpath import OutputPathError, check_output_file

if TYPE_CHECKING:  # pandas costs every worker process ~0.4 s of imports
    import pandas as pd


def nothing_measured(rows: list[dict[str, Any]]) -> bool:
    """True when rows exist and none was measured: a run that failed everywhere, whatever
    the cause (error, oom, unsupported, ...), must not exit 0 and read as a success."""
    return bool(rows) and not any(r["status"] in MEASURED for r in rows)


def status_counts(rows: list[dict[str, Any]]) -> str:
    """``"3 error, 2 oom"``: how many rows of each status, for a one-line summary."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


@dataclass
class Row:
    """One cell: method x shape x dtype x beta x phase."""

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
    # Timing (milliseconds); None when not timed.
    median_ms: float | None = None
    p20_ms: float | None = None
    p80_ms: float | None = None
    samples_ms: list[float] = field(default_factory=list)
    # Triton kernels run by the interpreter on CPU: timings meaningless for GPUs.
    interpreted: bool = False
    # First call (compilation, autotuning, caches) of the fwd+bwd step.
    compile_ms: float | None = None
    # Peak tensor memory of the phase above what was allocated when it started
    # (the paper's figure; CUDA allocator, or torch's CPU allocation events), and
    # the absolute peak (allocator on CUDA, process RSS on CPU).
    peak_bytes: int | None = None
    peak_abs_bytes: int | None = None
    # CPU only: growth of the process RSS at its peak (interpreter temporaries included).
    rss_peak_bytes: int | None = None
    # Errors against the fp32 reference: loss, dE, dC (max absolute), and the
    # tolerance the correctness gate applied to each.
    max_abs_err: float | None = None
    loss_err: float | None = None
    grad_e_err: float | None = None
    grad_c_err: float | None = None
    tolerance: dict[str, float] | None = None
    # What the inputs were (perfsuite.plan.workloads): "random", "synthetic(...)" or
    # "file:NAME", and the measured mean token entropy (nats) of their softmax.
    workload: str = "random"
    entropy: float | None = None
    # Two fwd+bwd calls on the same inputs gave the same loss, dE and dC bits; None
    # when not measured (the Triton interpreter: its sequential numpy says nothing).
    deterministic: bool | None = None
    # Why the machine was busy while this cell was measured ("" when quiet):
    # other processes on the cores, a throttled or shared GPU (perfsuite.measure.machine).
    busy: str = ""
    # Tensor-parallel size (``run --tp``): the classifier sharded over V across this many
    # ranks, measured by the multi-rank harness (perfsuite.run.ranks). None: one device,
    # no process group (every run before --tp, and every run without it). Part of the
    # cell's identity: a TP = 2 cell never matches a TP = 1 one, nor a one-device one.
    tp: int | None = None
    # Across ranks, per call of the phase: collectives issued by one rank, the bytes they
    # moved (input sizes), and their time on the rank where it was largest, when the
    # profiler can tell (None: not measured).
    collectives: int | None = None
    collective_bytes: int | None = None
    collective_ms: float | None = None
    # ``step`` rows: the loss's milliseconds in the step (the step's fwd+bwd less the same
    # model's with a trivial loss on the hidden states, medians); None elsewhere.
    loss_ms: float | None = None
    # How the samples were timed (``measure.timers.TIMERS``): part of the cell's identity.
    timer: str = "events"
    # ``--profile``: one extra profiled call per phase, after the timed samples
    # (``measure.profile.Breakdown.as_dict()``), and its trace's file name in the folder.
    breakdown: dict[str, Any] | None = None
    trace: str | None = None

    # The kind of cell (``kinds.KINDS``); None: read from the fields when the document is
    # made (``kinds.row_kind``), since some writers set ``tp`` or ``workload`` later.
    kind: str | None = None

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r} not one of {KINDS}")
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} not one of {STATUSES}")
        if self.phase not in PHASES and self.phase not in STEP_PHASES:
            raise ValueError(f"phase {self.phase!r} not one of {PHASES} or {STEP_PHASES}")


def new_document(
    env: dict[str, Any],
    rows: list[Row] | list[dict[str, Any]],
    kind: str | None = None,
) -> dict[str, Any]:
    """A version 2 document in memory: flat rows, each with its kind (``kind``, else the
    row's own, else read from its fields); ``write_results`` nests them as written."""
    out = []
    for r in rows:
        row = asdict(r) if isinstance(r, Row) else dict(r)
        row["kind"] = kind or row_kind(row)
        out.append(row)
    return {"schema_version": SCHEMA_VERSION, "env": env, "rows": out}


def check_writable(
    path: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    flag: str = "--out",
    inputs: Iterable[str | os.PathLike[str] | None] = (),
) -> Path:
    """Raise ``ResultsError`` now if ``path`` cannot take a results file, before anything
    is measured (``perfsuite.results.outpath``'s check and words)."""
    try:
        return check_output_file(path, flag, overwrite=overwrite, inputs=inputs)
    except OutputPathError as err:
        raise ResultsError(str(err)) from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_results(path: str | os.PathLike[str], document: dict[str, Any]) -> Path:
    """Write ``document`` to ``path`` atomically, with the user's umask (not mkstemp's 0600);
    a version 2 results document as the schema lays it out (``kinds.to_disk``), any other
    document (converge's, a sensitivity report) as it is."""
    path = Path(path)
    if document.get("schema_version") == SCHEMA_VERSION and isinstance(document.get("rows"), list):
        document = to_disk(document)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(document, f, indent=1, allow_nan=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def json_error(text: str, err: json.JSONDecodeError) -> str:
    """One line for a JSON parse error: where, and whether the file looks cut short.

    json's own message ends in "at" where it names a position ("Unterminated string
    starting at"), so "at line" would double it. A file cut short fails at its end, or
    inside a string that runs to its end: both get "(truncated?)"; an empty file says so.
    """
    if not text.strip():
        return "not valid JSON: the file is empty"
    cut = err.pos >= len(text.rstrip()) - 1 or err.msg.startswith("Unterminated string")
    where = f"line {err.lineno} column {err.colno}"
    msg = err.msg[: -len(" at")] if err.msg.endswith(" at") else err.msg
    return f"not valid JSON{' (truncated?)' if cut else ''}: {msg} at {where}"


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a results file (version 1 or 2) and check it against the schema
    (``perfsuite.results.schema``): flat rows, each with its kind. ``ResultsError`` says,
    in one line, what is wrong with it: the file, the row and the field."""
    from perfsuite.results.schema import validate  # pydantic: only where a file is read

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such results file") from None
    except IsADirectoryError:
        raise ResultsError(f"{path}: a folder, not a results file") from None
    except UnicodeDecodeError as err:
        raise ResultsError(
            f"{path}: not a results file (not UTF-8 text: byte {err.object[err.start]:#04x} "
            f"at offset {err.start})"
        ) from None
    except OSError as err:
        raise ResultsError(f"{path}: cannot read ({err.strerror})") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise ResultsError(f"{path}: {json_error(text, err)}") from None
    except RecursionError:
        raise ResultsError(f"{path}: not a results file (nested too deeply)") from None
    return validate(document, path)


def to_dataframe(document: dict[str, Any]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(document["rows"], columns=list(Row.__dataclass_fields__))


def load_dataframe(path: str | os.PathLike[str]) -> pd.DataFrame:
    """One call from a results file to a DataFrame, one row per cell."""
    return to_dataframe(load_results(path))
