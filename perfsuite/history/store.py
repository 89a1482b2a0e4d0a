"""The history database: an embedded SQLite file, one row per run and one per cell.

Default path: ``.perfsuite/history.sqlite`` below the working directory (a
machine-local cache, not a committed report), overridden by
``$PERFSUITE_HISTORY_DB`` or ``--db PATH``.

Tables
------
``runs``   one results document: its content hash (the idempotency key), the
           commit (``env.git.sha``, dirty flag), the time (``env.created``), the
           device (kind, name) and an environment hash (library versions, Python,
           driver), plus the whole ``env`` as JSON.
``cells``  one row of a run: the cell key (method x tokens x vocab x hidden x
           dtype x beta x phase x softcap x workload x tp), status, median/p20/p80 ms,
           the raw samples (JSON text) and the peak bytes. ``cell_id`` names the
           cell across runs (a hash of the device name and the key). ``tp`` NULL is
           one device (every run before ``run --tp``); K is K ranks.
``acks``   acknowledged regressions: (cell_id, run hash, metric) and a reason.

Why SQLite: one file, no server, transactions (a crash mid-write never leaves
half a run), and the stdlib reads it.

Schema 1 (before ``tp``) is migrated to 2 by the first command that writes
(``add``, ``import``, ``ack``): its cells get ``tp`` NULL, one device, and keep their
``cell_id``, so acknowledgements still apply. Read-only commands (``list``,
``check``, ``dashboard``) read a schema-1 file as it is, without writing to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_DB = Path(".perfsuite") / "history.sqlite"
DB_ENV_VAR = "PERFSUITE_HISTORY_DB"
SCHEMA_VERSION = 2
# Versions this perfsuite reads; an older one is migrated when opened for writing.
READABLE_VERSIONS = (1, 2)

# The columns that identify a cell across runs (results.CELL_KEY; the workload and
# the TP size, ``tp``, are added by ``cell_id``).
CELL_COLUMNS = ("method", "tokens", "vocab", "hidden", "dtype", "beta", "phase", "softcap")
METRICS = ("time", "memory")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    content_hash TEXT NOT NULL UNIQUE,
    source TEXT NOT NULL,
    created TEXT NOT NULL,
    sha TEXT NOT NULL,
    dirty INTEGER NOT NULL,
    device_kind TEXT NOT NULL,
    device_name TEXT NOT NULL,
    env_hash TEXT NOT NULL,
    n_cells INTEGER NOT NULL,
    added TEXT NOT NULL,
    env_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS cells (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    cell_id TEXT NOT NULL,
    method TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    vocab INTEGER NOT NULL,
    hidden INTEGER NOT NULL,
    dtype TEXT NOT NULL,
    beta REAL NOT NULL,
    phase TEXT NOT NULL,
    softcap REAL,
    workload TEXT NOT NULL,
    tp INTEGER,
    shape TEXT NOT NULL,
    device TEXT NOT NULL,
    status TEXT NOT NULL,
    interpreted INTEGER NOT NULL,
    median_ms REAL,
    p20_ms REAL,
    p80_ms REAL,
    samples_json TEXT NOT NULL,
    peak_bytes INTEGER
);
CREATE INDEX IF NOT EXISTS cells_by_cell ON cells(cell_id);
CREATE INDEX IF NOT EXISTS cells_by_run ON cells(run_id);
CREATE TABLE IF NOT EXISTS acks (
    id INTEGER PRIMARY KEY,
    cell_id TEXT NOT NULL,
    run_hash TEXT NOT NULL,
    metric TEXT NOT NULL,
    reason TEXT NOT NULL,
    created TEXT NOT NULL,
    UNIQUE (cell_id, run_hash, metric)
);
"""


class StoreError(RuntimeError):
    """The database cannot be opened or is not a history database (exit code 2)."""


@dataclass(frozen=True)
class Run:
    """One stored results document, as ``history list`` shows it."""

    id: int
    content_hash: str
    source: str
    created: str
    sha: str
    dirty: bool
    device_kind: str
    device_name: str
    env_hash: str
    n_cells: int

    @property
    def short(self) -> str:
        """The run's name on the command line: its content hash's first 12 digits."""
        return self.content_hash[:12]


def default_db_path() -> Path:
    """``$PERFSUITE_HISTORY_DB`` or ``.perfsuite/history.sqlite``."""
    return Path(os.environ.get(DB_ENV_VAR) or DEFAULT_DB)


def connect(
    path: str | os.PathLike[str] | None = None, create: bool = True, write: bool = True
) -> sqlite3.Connection:
    """Open the database; ``StoreError`` in one line if not.

    With ``create`` (``add``, ``import``) a missing database is made and initialised.
    Without it the file must already be a history database, and nothing is written
    to set one up: an empty or foreign file stays as it was (issue 20: ``list`` turned
    an empty file into a 40 KB database). ``write=False`` opens it read-only."""
    path = Path(path) if path is not None else default_db_path()
    if not create:
        if not path.is_file():
            raise StoreError(f"{path}: no history database (run `history add` or `history import`)")
        return _open_existing(path, write)
    if not path.parent.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StoreError(f"{path}: cannot create its folder ({err.strerror})") from None
    filled = path.is_file() and path.stat().st_size > 0
    try:
        conn = sqlite3.connect(path, isolation_level=None)  # transactions opened by hand
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        if filled and not _tables(conn):
            raise StoreError(f"{path}: not a history database (an SQLite file without its tables)")
        conn.executescript(SCHEMA)
        stored = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if stored is None:
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        else:
            _check_version(path, stored["value"])
            _migrate(conn, int(stored["value"]))
    except sqlite3.DatabaseError as err:
        raise StoreError(f"{path}: cannot open as a history database ({err})") from None
    return conn


def _tables(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {row[0] for row in rows}


def _check_version(path: Path, stored: str) -> None:
    if int(stored) not in READABLE_VERSIONS:
        raise StoreError(f"{path}: history schema {stored}, this perfsuite reads {SCHEMA_VERSION}")


def has_tp(conn: sqlite3.Connection) -> bool:
    """Whether ``cells`` has the ``tp`` column (schema 2; a schema-1 file read as it is
    has not)."""
    return any(row[1] == "tp" for row in conn.execute("PRAGMA table_info(cells)"))


def _migrate(conn: sqlite3.Connection, version: int) -> None:
    """Schema 1 -> 2 in one transaction: ``cells.tp``, NULL (one device) for old rows."""
    if version >= SCHEMA_VERSION:
        return
    with transaction(conn):
        if not has_tp(conn):
            conn.execute("ALTER TABLE cells ADD COLUMN tp INTEGER")
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
        )


def _open_existing(path: Path, write: bool) -> sqlite3.Connection:
    """An existing history database, opened without creating or initialising anything."""
    mode = "rw" if write else "ro"
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode={mode}", uri=True)
        conn.isolation_level = None
        conn.row_factory = sqlite3.Row
        if not {"meta", "runs", "cells", "acks"} <= _tables(conn):
            conn.close()
            raise StoreError(f"{path}: not a history database (run `history add` or `import`)")
        if write:
            conn.execute("PRAGMA foreign_keys = ON")
        stored = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        _check_version(path, stored["value"] if stored else "0")
        if write:
            _migrate(conn, int(stored["value"]))
    except sqlite3.DatabaseError as err:
        raise StoreError(f"{path}: not a history database ({err})") from None
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception: all or nothing."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def canonical_json(value: Any) -> str:
    """Key-sorted compact JSON: equal documents give equal text whatever their layout."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True)


def content_hash(document: dict[str, Any]) -> str:
    """The idempotency key of a results document: sha256 of its canonical JSON."""
    return hashlib.sha256(canonical_json(document).encode()).hexdigest()


def env_hash(env: dict[str, Any]) -> str:
    """What makes two runs' environments comparable: library versions, Python, driver, CUDA."""
    versions = {k: v for k, v in (env.get("versions") or {}).items() if k != "perfsuite"}
    device = env.get("device") or {}
    key = {
        "versions": versions,
        "python": env.get("python"),
        "driver": device.get("driver"),
        "cuda": device.get("cuda"),
    }
    return hashlib.sha256(canonical_json(key).encode()).hexdigest()[:12]


def cell_id(device_name: str, key: dict[str, Any]) -> str:
    """A cell's stable name across runs and databases: a hash of the device and the cell key.

    The TP size joins the hash only when there is one: a one-device cell keeps the name
    it had before ``tp`` existed (acknowledgements name cells by it)."""
    ident = [device_name, *(key[c] for c in CELL_COLUMNS), key.get("workload", "random")]
    if key.get("tp") is not None:
        ident.append(["tp", key["tp"]])
    if key.get("timer", "events") != "events":  # events: every cell before --timer
        ident.append(["timer", key["timer"]])
    return hashlib.sha256(canonical_json(ident).encode()).hexdigest()[:10]


def has_run(conn: sqlite3.Connection, digest: str) -> bool:
    return (
        conn.execute("SELECT 1 FROM runs WHERE content_hash = ?", (digest,)).fetchone() is not None
    )


def insert_run(conn: sqlite3.Connection, values: dict[str, Any]) -> int:
    """Insert one run row; returns its id. Call inside ``transaction``."""
    columns = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    cur = conn.execute(f"INSERT INTO runs ({columns}) VALUES ({marks})", tuple(values.values()))
    return int(cur.lastrowid)


def insert_cell(conn: sqlite3.Connection, run_id: int, values: dict[str, Any]) -> None:
    """Insert one cell row of run ``run_id``. Call inside ``transaction``."""
    values = {"run_id": run_id, **values}
    columns = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    conn.execute(f"INSERT INTO cells ({columns}) VALUES ({marks})", tuple(values.values()))


def _run(row: sqlite3.Row) -> Run:
    return Run(
        id=row["id"],
        content_hash=row["content_hash"],
        source=row["source"],
        created=row["created"],
        sha=row["sha"],
        dirty=bool(row["dirty"]),
        device_kind=row["device_kind"],
        device_name=row["device_name"],
        env_hash=row["env_hash"],
        n_cells=row["n_cells"],
    )


def list_runs(conn: sqlite3.Connection) -> list[Run]:
    """All runs in time order (``env.created``, then insertion order)."""
    rows = conn.execute("SELECT * FROM runs ORDER BY created, id").fetchall()
    return [_run(r) for r in rows]


def tp_sizes(conn: sqlite3.Connection) -> dict[int, list[int]]:
    """Run id -> the TP sizes of its cells measured across ranks (runs without: absent)."""
    if not has_tp(conn):
        return {}
    out: dict[int, list[int]] = {}
    query = "SELECT DISTINCT run_id, tp FROM cells WHERE tp IS NOT NULL ORDER BY run_id, tp"
    for row in conn.execute(query):
        out.setdefault(row["run_id"], []).append(row["tp"])
    return out


def find_run(conn: sqlite3.Connection, prefix: str) -> Run | None:
    """The run whose content hash starts with ``prefix`` (None if none or ambiguous)."""
    rows = conn.execute(
        "SELECT * FROM runs WHERE content_hash LIKE ? || '%' LIMIT 2", (prefix.lower(),)
    ).fetchall()
    return _run(rows[0]) if len(rows) == 1 else None


def cell_rows(conn: sqlite3.Connection, device_name: str | None = None) -> list[sqlite3.Row]:
    """Every cell of every run with its run's time, commit and device, in time order."""
    # A schema-1 file opened read-only has no tp column: its cells are one device.
    tp = "" if has_tp(conn) else " NULL AS tp,"
    query = f"""
        SELECT c.*,{tp} r.content_hash, r.created, r.sha, r.dirty, r.device_kind,
               r.device_name, r.env_hash, r.id AS run_key
        FROM cells c JOIN runs r ON r.id = c.run_id
    """
    args: tuple[Any, ...] = ()
    if device_name is not None:
        query += " WHERE r.device_name = ?"
        args = (device_name,)
    query += " ORDER BY c.cell_id, r.created, r.id"
    return conn.execute(query, args).fetchall()


def has_cell(conn: sqlite3.Connection, cell: str) -> bool:
    return (
        conn.execute("SELECT 1 FROM cells WHERE cell_id = ? LIMIT 1", (cell,)).fetchone()
        is not None
    )


def add_ack(conn: sqlite3.Connection, cell: str, run_hash: str, metric: str, reason: str) -> None:
    """Record (or replace) the acknowledgement of a regression."""
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with transaction(conn):
        conn.execute(
            "INSERT OR REPLACE INTO acks(cell_id, run_hash, metric, reason, created)"
            " VALUES (?, ?, ?, ?, ?)",
            (cell, run_hash, metric, reason, now),
        )


def acks(conn: sqlite3.Connection) -> dict[tuple[str, str, str], str]:
    """(cell_id, run hash, metric) -> reason; metric ``*`` acknowledges both metrics."""
    rows = conn.execute("SELECT cell_id, run_hash, metric, reason FROM acks").fetchall()
    return {(r["cell_id"], r["run_hash"], r["metric"]): r["reason"] for r in rows}
