"""Results files into the history: validated, idempotent, one transaction per file.

A file is read and checked by ``perfsuite.results.results.load_results`` and
then converted in full *before* anything is written, so a corrupt file is
refused with a one-line reason and stores nothing; the writes of one file run
in one transaction, so a crash mid-write leaves no half run. The content hash
of the document (canonical JSON) is the key: adding a file twice, or a copy of
it under another name, stores it once.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfsuite.history import store
from perfsuite.results.results import ResultsError, load_results


class IngestError(ValueError):
    """A results file the history refuses (one line: path and reason)."""


@dataclass(frozen=True)
class Added:
    """The outcome of adding one file."""

    path: str
    content_hash: str
    n_cells: int
    duplicate: bool  # already stored: nothing written


def _number(row: dict[str, Any], key: str, kind: type, i: int, path: str) -> Any:
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise IngestError(f"{path}: row {i} {key} is {value!r}, not a number")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return kind(value)


def _cell_values(row: dict[str, Any], i: int, path: str, device_name: str) -> dict[str, Any]:
    """One results row as a ``cells`` row; ``IngestError`` if a field has the wrong type."""
    for key in ("tokens", "vocab", "hidden"):
        if _number(row, key, int, i, path) is None:
            raise IngestError(f"{path}: row {i} lacks a numeric {key}")
    if _number(row, "beta", float, i, path) is None:
        raise IngestError(f"{path}: row {i} lacks a numeric beta")
    tp = row.get("tp")  # None: one device (every file before ``run --tp``)
    if tp is not None and (isinstance(tp, bool) or not isinstance(tp, int) or tp < 1):
        raise IngestError(f"{path}: row {i} tp is {tp!r}, not a TP size (an integer >= 1)")
    samples = row.get("samples_ms") or []
    if not isinstance(samples, list) or not all(
        isinstance(s, int | float) and not isinstance(s, bool) for s in samples
    ):
        raise IngestError(f"{path}: row {i} samples_ms is not a list of numbers")
    key = {
        "method": str(row["method"]),
        "tokens": int(row["tokens"]),
        "vocab": int(row["vocab"]),
        "hidden": int(row["hidden"]),
        "dtype": str(row["dtype"]),
        "beta": float(row["beta"]),
        "phase": str(row["phase"]),
        "softcap": _number(row, "softcap", float, i, path),
        "workload": str(row.get("workload") or "random"),
        "tp": tp,
    }
    return {
        "cell_id": store.cell_id(device_name, {**key, "timer": row.get("timer") or "events"}),
        **key,
        "shape": str(row.get("shape") or ""),
        "device": str(row.get("device") or ""),
        "status": str(row["status"]),
        "interpreted": int(bool(row.get("interpreted"))),
        "median_ms": _number(row, "median_ms", float, i, path),
        "p20_ms": _number(row, "p20_ms", float, i, path),
        "p80_ms": _number(row, "p80_ms", float, i, path),
        "samples_json": json.dumps([float(s) for s in samples if math.isfinite(s)]),
        "peak_bytes": _number(row, "peak_bytes", int, i, path),
    }


def read_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``load_results`` plus what the history needs: a run time and a device name."""
    try:
        document = load_results(path)
    except ResultsError as err:
        raise IngestError(str(err)) from None
    env = document["env"]
    created = env.get("created")
    if not isinstance(created, str) or not created:
        raise IngestError(f"{path}: env.created missing: the run cannot be placed in time")
    if not isinstance(env.get("device") or {}, dict) or not isinstance(env.get("git") or {}, dict):
        raise IngestError(f"{path}: env.device or env.git is not an object")
    return document


def prepare(
    document: dict[str, Any], path: str
) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    """Everything to write for one document, computed before the transaction opens."""
    env = document["env"]
    device = env.get("device") or {}
    git = env.get("git") or {}
    device_name = str(device.get("name") or device.get("kind") or "unknown")
    digest = store.content_hash(document)
    cells = [_cell_values(row, i, path, device_name) for i, row in enumerate(document["rows"])]
    run = {
        "content_hash": digest,
        "source": str(path),
        "created": str(env["created"]),
        "sha": str(git.get("sha") or "unknown"),
        "dirty": int(bool(git.get("dirty"))),
        "device_kind": str(device.get("kind") or "unknown"),
        "device_name": device_name,
        "env_hash": store.env_hash(env),
        "n_cells": len(cells),
        "added": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "env_json": store.canonical_json(env),
    }
    return digest, run, cells


def add_document(conn: sqlite3.Connection, document: dict[str, Any], path: str) -> Added:
    """Store one validated document (all of it or nothing); a stored one again is a no-op."""
    digest, run, cells = prepare(document, path)
    with store.transaction(conn):
        if store.has_run(conn, digest):
            return Added(path, digest, len(cells), duplicate=True)
        run_id = store.insert_run(conn, run)
        for cell in cells:
            store.insert_cell(conn, run_id, cell)
    return Added(path, digest, len(cells), duplicate=False)


def looks_like_results(path: Path) -> bool:
    """Is this JSON meant to be a results document (so that a defect in it is an error)?

    Other JSON under reports/ (sensitivity reports, plots' data) is skipped with
    a note; a file that cannot be parsed at all counts as a broken results file.
    """
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return True
    if not isinstance(document, dict):
        return False
    if "schema_version" in document:
        return True
    # Another command's document names its own schema (filtering studies, converge).
    return "rows" in document and "schema" not in document


def results_files(root: str | os.PathLike[str]) -> list[Path]:
    """Every ``*.json`` below ``root``, in path order (hidden folders skipped)."""
    root = Path(root)
    found = [
        p
        for p in root.rglob("*.json")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    ]
    return sorted(found)
