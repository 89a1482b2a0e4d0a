"""What ``render.dashboard`` draws: per shape, **groups** (a plot: cells differing only by
method and TP size), a **line** per series and metric, a **mark** per change point."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from dataclasses import dataclass

from perfsuite.history import rules, store
from perfsuite.regress.verdicts import method_label

GROUP_FIELDS = ("device_name", *store.CELL_COLUMNS[1:], "workload")


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
    positions: list[int]
    values: list[float]
    low: list[float | None]  # p20 (time), else None
    high: list[float | None]  # p80 (time), else None


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
        size = f"{k['tokens']}×{k['vocab']}×{k['hidden']}"
        what = f"{k['device_name']} · {size} {k['dtype']} β={k['beta']:g} {k['phase']}"
        return what + rules.extras(k, " · ")


def load(conn: sqlite3.Connection, accept_busy: bool = False) -> dict[str, list[Group]]:
    """Shape name -> its groups, sorted; ``accept_busy``: as ``history check --accept-busy``."""
    by_group: dict[tuple, list[list[sqlite3.Row]]] = {}
    for rows in rules.cells(conn):
        by_group.setdefault(tuple(rows[0][f] for f in GROUP_FIELDS), []).append(rows)
    acknowledged = store.acks(conn)
    untimed = set() if accept_busy else set(rules.busy_runs(conn))
    shapes: dict[str, list[Group]] = {}
    for key in sorted(by_group, key=lambda k: [(v is not None, 0 if v is None else v) for v in k]):
        group = _build(key, by_group[key], acknowledged, untimed)
        shapes.setdefault(group.shape, []).append(group)
    return dict(sorted(shapes.items()))


def _build(
    key: tuple,
    cells: list[list[sqlite3.Row]],
    acknowledged: dict[tuple[str, str, str], str],
    untimed: Collection[str] = (),
) -> Group:
    last_row = {r["content_hash"]: r for rows in cells for r in rows}
    ordered = sorted(last_row.values(), key=lambda r: (r["created"], r["run_key"]))
    runs = [
        RunRef(i, r["content_hash"], r["created"], r["sha"], bool(r["dirty"]))
        for i, r in enumerate(ordered)
    ]
    by_hash = {r.run_hash: r for r in runs}
    lines, marks, no_data = [], [], {}
    latest = ordered[-1]
    for rows in sorted(cells, key=lambda rows: (rows[0]["method"], rows[0]["tp"] or 0)):
        method = method_label(rows[0]["method"], rows[0]["tp"])
        spread = {r["content_hash"]: (r["p20_ms"], r["p80_ms"]) for r in rows}
        drawn = rules.cell_series(rows)
        for s in drawn:  # each has points
            band = [spread[p.run_hash] if s.metric == "time" else (None, None) for p in s.points]
            positions = [by_hash[p.run_hash].position for p in s.points]
            low, high = map(list, zip(*band, strict=True))
            values = [p.value for p in s.points]
            lines.append(Line(method, s.metric, s.cell_id, positions, values, low, high))
        for series in rules.cell_series(rows, untimed=untimed):  # what history check judges
            for change in rules.judge(series):
                around = by_hash[change.before_point.run_hash], by_hash[change.after_point.run_hash]
                state, why_not = rules.verdict(change, acknowledged), tuple(change.why_not)
                marks.append(
                    Mark(method, series.metric, change.ident, *around, change.size, state, why_not)
                )
        if not drawn:
            no_data[method] = ", ".join(sorted({r["status"] for r in rows}))
    key_of = dict(zip(GROUP_FIELDS, key, strict=True))
    shape = latest["shape"] or f"n{latest['tokens']}-v{latest['vocab']}-d{latest['hidden']}"
    return Group(shape, latest["device_kind"], key_of, runs, lines, marks, no_data)
