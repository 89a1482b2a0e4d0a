"""The history database: one SQLite file (a crash mid-write never leaves half a run) of runs
(by content hash), cells (``cell_id`` across runs) and acknowledged regressions."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

DEFAULT_DB = Path(".perfsuite") / "history.sqlite"
DB_ENV_VAR = "PERFSUITE_HISTORY_DB"
SCHEMA_VERSION = 2
# Versions this perfsuite reads; an older one is migrated when opened for writing.
READABLE_VERSIONS = (1, 2)

# What names a cell across runs (results.CELL_KEY); ``cell_id`` adds the workload and TP size.
CELL_COLUMNS = ("method", "tokens", "vocab", "hidden", "dtype", "beta", "phase", "softcap")
METRICS = ("time", "memory")

SCHEMA = f"""
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
INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '{SCHEMA_VERSION}');
"""


class StoreError(ValueError):
    """The database cannot be opened or is not a history database (bad input: exit 2)."""


@dataclass(frozen=True)
class Run:
    """One stored results document, as ``history list`` shows it."""

    id: int
    content_hash: str
    source: str
    created: str
    sha: str
    dirty: bool
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
    """Open the database (``StoreError`` if not); ``create``: a missing or empty file made one."""
    path = Path(path) if path is not None else default_db_path()
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StoreError(f"{path}: cannot create its folder ({err.strerror})") from None
    elif not path.is_file():
        raise StoreError(f"{path}: no history database (run `history add` or `history import`)")
    filled = path.is_file() and path.stat().st_size > 0
    mode = "rwc" if create else "rw" if write else "ro"
    conn = None
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode={mode}", uri=True)
        conn.isolation_level = None  # transactions opened by hand
        conn.row_factory = sqlite3.Row
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if (filled or not create) and not {"meta", "runs", "cells", "acks"} <= tables:
            raise StoreError(f"{path}: not a history database (an SQLite file without its tables)")
        if write:
            conn.execute("PRAGMA foreign_keys = ON")
        if create:
            conn.executescript(SCHEMA)  # a new file's schema version: this one
        stored = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(stored["value"]) if stored else 0
        if version not in READABLE_VERSIONS:
            reads = " and ".join(map(str, READABLE_VERSIONS))
            raise StoreError(f"{path}: history schema {version}, this perfsuite reads {reads}")
        if not write and version < SCHEMA_VERSION:  # read as it is: its cells are one device
            conn.execute("CREATE TEMP VIEW cells AS SELECT *, NULL AS tp FROM main.cells")
        elif version < SCHEMA_VERSION:  # 1 -> 2: ``cells.tp``, NULL for old rows
            with transaction(conn):
                conn.execute("ALTER TABLE cells ADD COLUMN tp INTEGER")
                conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    except (sqlite3.DatabaseError, StoreError) as err:
        if conn is not None:
            conn.close()
        if isinstance(err, StoreError):
            raise
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


def utc_now() -> str:
    """Now, as runs and acknowledgements record when they were added."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def canonical_json(value: Any) -> str:
    """Key-sorted compact JSON: equal documents give equal text whatever their layout."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True)


def content_hash(value: Any) -> str:
    """sha256 of the canonical JSON: a results document's idempotency key, and every hash here."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def env_hash(env: dict[str, Any]) -> str:
    """What makes two runs' environments comparable: library versions, Python, driver, CUDA."""
    versions = {k: v for k, v in (env.get("versions") or {}).items() if k != "perfsuite"}
    device = env.get("device") or {}
    key = {"versions": versions, "python": env.get("python")}
    key |= {k: device.get(k) for k in ("driver", "cuda")}
    return content_hash(key)[:12]


def cell_id(device_name: str, key: dict[str, Any]) -> str:
    """A cell's name across runs and databases: a hash of the device and cell key (a TP size
    or timer only when set, so older cells keep the names that acknowledgements use)."""
    ident = [device_name, *(key[c] for c in CELL_COLUMNS), key.get("workload", "random")]
    if key.get("tp") is not None:
        ident.append(["tp", key["tp"]])
    if key.get("timer", "events") != "events":  # events: every cell before --timer
        ident.append(["timer", key["timer"]])
    return content_hash(ident)[:10]


def exists(conn: sqlite3.Connection, table: str, column: str, value: str) -> bool:
    """Whether a row of ``table`` holds ``value`` in ``column``."""
    query = f"SELECT 1 FROM {table} WHERE {column} = ? LIMIT 1"
    return conn.execute(query, (value,)).fetchone() is not None


def insert(conn: sqlite3.Connection, table: str, values: dict[str, Any]) -> int:
    """Insert one row (a run, or a cell with its ``run_id``) in a ``transaction``; its id."""
    marks = ", ".join("?" for _ in values)
    query = f"INSERT INTO {table} ({', '.join(values)}) VALUES ({marks})"
    return int(conn.execute(query, tuple(values.values())).lastrowid)


def _run(row: sqlite3.Row) -> Run:
    return Run(**{f.name: row[f.name] for f in fields(Run)} | {"dirty": bool(row["dirty"])})


def list_runs(conn: sqlite3.Connection) -> list[Run]:
    """All runs in time order (``env.created``, then insertion order)."""
    return [_run(r) for r in conn.execute("SELECT * FROM runs ORDER BY created, id")]


def tp_sizes(conn: sqlite3.Connection) -> dict[int, list[int]]:
    """Run id -> the TP sizes of its cells measured across ranks (runs without: absent)."""
    query = "SELECT run_id, group_concat(DISTINCT tp) FROM cells WHERE tp NOT NULL GROUP BY run_id"
    return {run: sorted(map(int, tps.split(","))) for run, tps in conn.execute(query)}


def find_run(conn: sqlite3.Connection, prefix: str) -> Run | None:
    """The run whose content hash starts with ``prefix`` (None if none or ambiguous)."""
    query = "SELECT * FROM runs WHERE content_hash LIKE ? || '%' LIMIT 2"
    rows = conn.execute(query, (prefix.lower(),)).fetchall()
    return _run(rows[0]) if len(rows) == 1 else None


def cell_rows(conn: sqlite3.Connection, device_name: str | None = None) -> list[sqlite3.Row]:
    """Every cell of every run with its run's time, commit and device, in time order."""
    query = """
        SELECT c.*, r.content_hash, r.created, r.sha, r.dirty, r.device_kind,
               r.device_name, r.env_hash, r.id AS run_key
        FROM cells c JOIN runs r ON r.id = c.run_id WHERE ?1 IS NULL OR r.device_name = ?1
        ORDER BY c.cell_id, r.created, r.id
    """
    return conn.execute(query, (device_name,)).fetchall()


def add_ack(conn: sqlite3.Connection, cell: str, run_hash: str, metric: str, reason: str) -> None:
    """Record (or replace) the acknowledgement of a regression."""
    with transaction(conn):
        conn.execute(
            "INSERT OR REPLACE INTO acks(cell_id, run_hash, metric, reason, created)"
            " VALUES (?, ?, ?, ?, ?)",
            (cell, run_hash, metric, reason, utc_now()),
        )


def acks(conn: sqlite3.Connection) -> dict[tuple[str, str, str], str]:
    """(cell_id, run hash, metric) -> reason; metric ``*`` acknowledges both metrics."""
    rows = conn.execute("SELECT cell_id, run_hash, metric, reason FROM acks").fetchall()
    return {(r["cell_id"], r["run_hash"], r["metric"]): r["reason"] for r in rows}
