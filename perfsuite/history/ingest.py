"""Results files into the history: checked in full before anything is written, one
transaction per file, keyed by content hash (a file or its copy added twice is stored once)."""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.history import store
from perfsuite.results.kinds import TIMED_KINDS, require_kind
from perfsuite.results.results import ResultsError
from perfsuite.results.schema import validate


@dataclass(frozen=True)
class Added:
    """The outcome of adding one file."""

    content_hash: str
    n_cells: int
    duplicate: bool  # already stored: nothing written


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _cell_values(row: dict[str, Any], device_name: str) -> dict[str, Any]:
    """A checked row as a ``cells`` row (floats as stored: ``cell_id`` hashes beta 0 as 0.0)."""
    key = {
        **{k: row[k] for k in ("method", "tokens", "vocab", "hidden", "dtype", "phase")},
        "beta": float(row["beta"]),
        "softcap": _float(row.get("softcap")),
        "workload": row.get("workload") or "random",
        "tp": row.get("tp"),  # None: one device (every file before ``run --tp``)
    }
    return {
        "cell_id": store.cell_id(device_name, {**key, "timer": row.get("timer") or "events"}),
        **key,
        **{k: row.get(k) or "" for k in ("shape", "device")},
        "status": row["status"],
        "interpreted": int(bool(row.get("interpreted"))),
        **{k: _float(row.get(k)) for k in ("median_ms", "p20_ms", "p80_ms")},
        "samples_json": json.dumps([float(s) for s in row.get("samples_ms") or []]),
        "peak_bytes": row.get("peak_bytes"),
    }


def prepare(document: Any, path: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What to write for one parsed document, all checked first (``ResultsError`` if not)."""
    document = validate(document, path)
    require_kind(document, path, TIMED_KINDS, "history")
    env = document["env"]
    if not env.get("created"):
        raise ResultsError(f"{path}: env.created missing: the run cannot be placed in time")
    device = env.get("device") or {}
    git = env.get("git") or {}
    device_name = str(device.get("name") or device.get("kind") or "unknown")
    cells = [_cell_values(row, device_name) for row in document["rows"]]
    hashed = document["rows"]  # a version 1 document's as hashed before: without their kind
    if document["schema_version"] == 1:
        hashed = [{k: v for k, v in row.items() if k != "kind"} for row in hashed]
    run = {
        "content_hash": store.content_hash({**document, "rows": hashed}),
        "source": str(path),
        "created": env["created"],
        "sha": str(git.get("sha") or "unknown"),
        "dirty": int(bool(git.get("dirty"))),
        "device_kind": str(device.get("kind") or "unknown"),
        "device_name": device_name,
        "env_hash": store.env_hash(env),
        "n_cells": len(cells),
        "added": store.utc_now(),
        "env_json": store.canonical_json(env),
    }
    return run, cells


def add_document(conn: sqlite3.Connection, document: dict[str, Any], path: str) -> Added:
    """Store one document (all of it or nothing); a stored one again is a no-op."""
    run, cells = prepare(document, path)
    with store.transaction(conn):
        duplicate = store.exists(conn, "runs", "content_hash", run["content_hash"])
        if not duplicate:
            run_id = store.insert(conn, "runs", run)
            for cell in cells:
                store.insert(conn, "cells", {"run_id": run_id, **cell})
    return Added(run["content_hash"], len(cells), duplicate)


def looks_like_results(path: Path) -> bool:
    """Whether this JSON is meant as a results document (a defect in it is then an error):
    other JSON under reports/ is skipped; a file that cannot be parsed counts as broken."""
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return True
    if not isinstance(document, dict):
        return False
    # Another command's document names its own schema (filtering studies, converge).
    return "schema_version" in document or ("rows" in document and "schema" not in document)


def results_files(root: str | os.PathLike[str]) -> list[Path]:
    """Every ``*.json`` below ``root``, in path order (hidden folders skipped)."""
    root = Path(root)
    found = (p for p in root.rglob("*.json") if p.is_file())
    return sorted(p for p in found if not any(x.startswith(".") for x in p.relative_to(root).parts))
