"""The results file: one JSON document of provenance and a row per cell, built
(``new_document``), written atomically and read (its schema: ``results.schema``)."""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.results.kinds import (  # noqa: F401  (readers and writers import them from here)
    CELL_KEY,
    KINDS,
    MEASURED,
    PHASES,
    SCHEMA_VERSION,
    STATUSES,
    STEP_PHASES,
    ResultsError,
    Row,
    document_kinds,
    require_kind,
    to_disk,
)

if TYPE_CHECKING:  # pandas costs every worker process ~0.4 s of imports
    import pandas as pd


def nothing_measured(rows: list[dict[str, Any]]) -> bool:
    """True when rows exist and none was measured: a run that failed everywhere, whatever
    the cause (error, oom, unsupported, ...), must not exit 0 and read as a success."""
    return bool(rows) and not any(r["status"] in MEASURED for r in rows)


def status_counts(rows: list[dict[str, Any]]) -> str:
    """``"3 error, 2 oom"``: how many rows of each status, for a one-line summary."""
    counts = Counter(row["status"] for row in rows)
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def new_document(env: dict[str, Any], rows: list[Row] | list[dict[str, Any]]) -> dict[str, Any]:
    """A version 2 document in memory: flat rows, each with the kind of cell that made it
    (a row without one is a writer's mistake, never guessed from its fields)."""
    out = [asdict(r) if isinstance(r, Row) else dict(r) for r in rows]
    for i, row in enumerate(out):
        if row.get("kind") not in KINDS:
            raise ValueError(f"row {i} ({row.get('method')} {row.get('phase')}) has kind "
                             f"{row.get('kind')!r}, not one of {KINDS}")  # fmt: skip
    return {"schema_version": SCHEMA_VERSION, "env": env, "rows": out}


def write_atomically(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """``data`` into ``path`` through a temporary file and a rename, so that no reader and
    no crash ever sees half a file; with the user's umask (not mkstemp's 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        mask = os.umask(0)  # read the umask: setting it is the only way
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_results(path: str | os.PathLike[str], document: dict[str, Any]) -> Path:
    """Write ``document`` to ``path`` atomically: a version 2 results document nested as on
    disk (``kinds.to_disk``), any other (converge's, a sensitivity report) as it is."""
    if document.get("schema_version") == SCHEMA_VERSION and isinstance(document.get("rows"), list):
        document = to_disk(document)
    return write_atomically(path, json.dumps(document, indent=1, allow_nan=True) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    """A file's JSON; ``ResultsError`` says in one line what keeps it from being read."""
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
        if not text.strip():
            raise ResultsError(f"{path}: not valid JSON: the file is empty") from None
        # "(truncated?)" where it fails at the end, in a string running to it or at a
        # literal cut short (``nu``: json fails at its start); json's "... at" message would
        # say "at" twice.
        tail = text.rstrip()[err.pos :]
        cut = len(tail) <= 1 or err.msg.startswith("Unterminated string")
        cut = cut or any(word.startswith(tail) for word in ("null", "true", "false"))
        msg = f"{err.msg.removesuffix(' at')} at line {err.lineno} column {err.colno}"
        raise ResultsError(
            f"{path}: not valid JSON{' (truncated?)' if cut else ''}: {msg}"
        ) from None
    except RecursionError:
        raise ResultsError(f"{path}: not a results file (nested too deeply)") from None
    return document


def load_results(path: str | os.PathLike[str], *, empty: bool = False) -> dict[str, Any]:
    """A results file (version 1 or 2) checked against the schema (``schema.validate``):
    flat rows, each with its kind; else ``ResultsError``, one line."""
    from perfsuite.results.schema import validate  # pydantic: only where a file is read

    return validate(read_json(path), path, empty=empty)


def load_dataframe(path: str | os.PathLike[str]) -> pd.DataFrame:
    """One call from a results file to a DataFrame, one row per cell."""
    import pandas as pd

    return pd.DataFrame(load_results(path)["rows"], columns=list(Row.__dataclass_fields__))
