"""What the dashboard draws, read from the history: per shape, groups of cells over runs.

A **group** is everything one plot shows: the cells that differ only by method
and TP size (same device, tokens x vocab x hidden, dtype, beta, phase, softcap,
workload). Each series, a method at one TP size (``ours``: one device; ``ours
TP=2``: across 2 ranks, never joined to the other), has a **line** per metric
(median time with its p20-p80 band; peak memory), placed on the group's run
axis: the runs that measured any cell of the group, oldest first, numbered from
0. Each change point that ``rules.judge`` finds is a **mark** with its verdict
(``open``, ``acknowledged``, ``recovered`` regression, or a ``change`` that is
not a regression) and the commits around it. Marks are judged on the series
``history check`` judges (``rules.cell_series`` without the times of
``rules.busy_runs``), so the site and the check give one answer; the lines
draw every time point, a busy run's too.

This module only reads and arranges; ``perfsuite.render.dashboard`` draws.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from itertools import groupby

from perfsuite.history import rules, store

GROUP_FIELDS = (
    "device_name", "tokens", "vocab", "hidden", "dtype", "beta", "phase", "softcap", "workload",
)  # fmt: skip


@dataclass(frozen=True)
class RunRef:
    """One run on a group's axis."""

    position: int
    run_hash: str
    created: str
    sha: str
    dirty: bool

    @property
    def commit(self) -> str:
        """The commit as people write it: 10 digits, ``+dirty`` for uncommitted changes."""
        return self.sha[:10] + ("+dirty" if self.dirty else "")


@dataclass
class Line:
    """One series' values of one metric (time: median ms, p20/p80; memory: peak bytes)."""

    method: str  # the series' name: the method, with " TP=K" when measured across K ranks
    metric: str
    cell_id: str
    positions: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    low: list[float | None] = field(default_factory=list)
    high: list[float | None] = field(default_factory=list)


@dataclass(frozen=True)
class Mark:
    """One (merged) change point of one line, as ``rules.judge`` found and judged it."""

    method: str  # the series' name, as ``Line.method``
    metric: str
    ident: str  # CELL/RUN, what `history ack` takes
    before: RunRef
    after: RunRef  # the first run after the change: where the mark is drawn
    size: float
    state: str  # open | acknowledged | recovered | change
    why_not: tuple[str, ...]


@dataclass
class Group:
    """The cells of one plot: one device and configuration, every method."""

    shape: str
    device_kind: str
    key: dict[str, object]  # GROUP_FIELDS -> value
    runs: list[RunRef]
    lines: list[Line]
    marks: list[Mark]
    no_data: dict[str, str]  # series -> its statuses, for series with nothing to draw

    @property
    def title(self) -> str:
        k = self.key
        text = (
            f"{k['device_name']} · {k['tokens']}×{k['vocab']}×{k['hidden']} {k['dtype']} "
            f"β={k['beta']:g} {k['phase']}"
        )
        if k["softcap"] is not None:
            text += f" softcap={k['softcap']:g}"
        if k["workload"] != "random":
            text += f" · {k['workload']}"
        return text


def shape_name(row: sqlite3.Row) -> str:
    """The preset's name, or ``nTOKENS-vVOCAB-dHIDDEN`` for a row without one."""
    return row["shape"] or f"n{row['tokens']}-v{row['vocab']}-d{row['hidden']}"


def _cells(conn: sqlite3.Connection) -> Iterator[list[sqlite3.Row]]:
    """Each cell's rows, one per measurement, in time order."""
    for _, rows in groupby(store.cell_rows(conn), key=lambda r: r["cell_id"]):
        yield rules.unique_measurements(list(rows))


def _group_key(row: sqlite3.Row) -> tuple:
    return tuple(row[f] for f in GROUP_FIELDS)


def _sort_key(key: tuple) -> tuple:
    return tuple((v is not None, v if v is not None else 0) for v in key)


def load(conn: sqlite3.Connection, accept_busy: bool = False) -> dict[str, list[Group]]:
    """Shape name -> its groups (sorted by device and configuration); shapes sorted by name.
    ``accept_busy``: judge busy runs' times too (``history check --accept-busy``)."""
    by_group: dict[tuple, list[list[sqlite3.Row]]] = {}
    for rows in _cells(conn):
        by_group.setdefault(_group_key(rows[0]), []).append(rows)
    acknowledged = store.acks(conn)
    untimed = set() if accept_busy else set(rules.busy_runs(conn))
    shapes: dict[str, list[Group]] = {}
    for key in sorted(by_group, key=_sort_key):
        group = _build(key, by_group[key], acknowledged, untimed)
        shapes.setdefault(group.shape, []).append(group)
    return dict(sorted(shapes.items()))


def _build(
    key: tuple,
    cells: list[list[sqlite3.Row]],
    acknowledged: dict[tuple[str, str, str], str],
    untimed: Collection[str] = (),
) -> Group:
    runs_seen = {}
    for rows in cells:
        for r in rows:
            runs_seen[r["content_hash"]] = (r["created"], r["run_key"], r["sha"], bool(r["dirty"]))
    ordered = sorted(runs_seen.items(), key=lambda item: item[1][:2])
    runs = [
        RunRef(i, digest, created, sha, dirty)
        for i, (digest, (created, _, sha, dirty)) in enumerate(ordered)
    ]
    by_hash = {r.run_hash: r for r in runs}
    lines, marks, no_data = [], [], {}
    latest = max((rows[-1] for rows in cells), key=lambda r: (r["created"], r["run_key"]))
    for rows in sorted(cells, key=lambda rows: (rows[0]["method"], rows[0]["tp"] or 0)):
        method = rules.series_name(rows[0]["method"], rows[0]["tp"])
        spread = {r["content_hash"]: (r["p20_ms"], r["p80_ms"]) for r in rows}
        drawn = False
        for series in rules.cell_series(rows):
            line = Line(method, series.metric, series.cell_id)
            for p in series.points:
                line.positions.append(by_hash[p.run_hash].position)
                line.values.append(p.value)
                low, high = spread[p.run_hash] if series.metric == "time" else (None, None)
                line.low.append(low)
                line.high.append(high)
            lines.append(line)
            drawn = True
        for series in rules.cell_series(rows, untimed=untimed):  # what history check judges
            for change in rules.judge(series):
                marks.append(
                    Mark(
                        method=method,
                        metric=series.metric,
                        ident=change.ident,
                        before=by_hash[change.before_point.run_hash],
                        after=by_hash[change.after_point.run_hash],
                        size=change.size,
                        state=rules.verdict(change, acknowledged),
                        why_not=tuple(change.why_not),
                    )
                )
        if not drawn:
            no_data[method] = ", ".join(sorted({r["status"] for r in rows}))
    return Group(
        shape=shape_name(latest),
        device_kind=latest["device_kind"],
        key=dict(zip(GROUP_FIELDS, key, strict=True)),
        runs=runs,
        lines=lines,
        marks=marks,
        no_data=no_data,
    )
