"""Progress lines while a run measures: workers and cells starting (predicted peak, time
left), and a heartbeat at least every ``HEARTBEAT_S`` while a cell runs."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perfsuite.units import fmt_bytes

# Seconds a running cell may go without a line.
HEARTBEAT_S = 30.0
NoticeFn = Callable[[str], None]
# Told of each finished case: (method, case, its rows).
ProgressFn = Callable[[str, dict[str, Any], list[dict[str, Any]]], None]


def finished_lines(label: str, rows: list[dict[str, Any]]) -> list[str]:
    """A finished cell's console lines (rich markup): its label and statuses, then a
    warning when the harness marked its rows busy."""
    lines = [f"{label}: {','.join(sorted({r['status'] for r in rows}))}"]
    busy = next((r["busy"] for r in rows if r.get("busy")), "")
    if busy:
        lines.append(f"[yellow]warning: busy machine[/yellow] ({busy})")
    return lines


def duration(seconds: float) -> str:
    """``45 s``, ``3 min 20 s``, ``1 h 05 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def cell_label(method: str, case: dict[str, Any], width: int = 22, tokens: bool = True) -> str:
    """A case's words on a progress line: ``width`` columns of method (and TP size), the
    shape (and N, where a grid's shapes share a name pattern), dtype and β."""
    tp = f" TP={case['tp']}" if case.get("tp") else ""
    n = f" N={case['tokens']}" if tokens else ""
    return f"{method + tp:<{width}} {case['shape']}{n} {case['dtype']} β={case['beta']:g}"


@dataclass
class _Worker:
    """What the tracker last said about one method's running worker."""

    batch: list[dict[str, Any]]
    cell_since: float
    said_at: float
    # Since when the next finished cell's seconds count: the worker's start (imports are
    # its first cell's cost), then the last finish.
    charged_since: float
    started: int = -1  # index in ``batch`` of the last case started
    in_cell: bool = False  # that case has not finished
    stage: str = "starting"


class Tracker:
    """Turns worker output into progress lines (``notice``), for every thread that
    drives a worker. Time left: each side's (interpreted, native) seconds per unit of
    modelled cost over its cost to go, scaled by the cell-seconds the run fits in a second
    (workers run side by side); a side with no finished cell yet is left out, and the line
    says so. A cell's cost is ``kind.work``, times an interpreted method's declared cost."""

    def __init__(
        self,
        units: list[tuple[str, dict[str, Any]]],
        notice: NoticeFn,
        kind: Any,  # a ``harness.kind.Kind``: the kind imports this module
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.notice, self.kind, self.clock = notice, kind, clock
        self.total = len(units)
        self.left: defaultdict[str, float] = defaultdict(float)  # modelled cost to go
        for method, case in units:
            side, cost = self._model(method, case)
            self.left[side] += cost
        self.spent: defaultdict[str, float] = defaultdict(float)  # finished cells' seconds
        self.done: defaultdict[str, float] = defaultdict(float)  # their modelled cost
        self.cells_started = 0
        self.t0 = clock()
        self.workers: dict[str, _Worker] = {}
        self.lock = threading.Lock()

    def _model(self, method: str, case: dict[str, Any]) -> tuple[str, float]:
        if self.kind.interpreted(method):
            return "interpreted", self.kind.cost(method) * self.kind.work(method, case)
        return "native", self.kind.work(method, case)

    def worker_started(self, method: str, batch: list[dict[str, Any]]) -> None:
        with self.lock:
            now = self.clock()
            self.workers[method] = _Worker(list(batch), now, now, now)
            self.notice(f"{method}: worker starting ({len(batch)} cell(s) to measure)")

    def poll(self, method: str, lines: list[dict[str, Any]]) -> None:
        """Called with the worker's whole output at every poll of the harness."""
        with self.lock:
            worker = self.workers.get(method)
            if worker is None:
                return
            now = self.clock()
            for line in lines:
                if "start" in line and line["start"] > worker.started:
                    worker.started, worker.stage, worker.cell_since = line["start"], "gate", now
                    worker.in_cell = worker.started < len(worker.batch)
                    if worker.in_cell:
                        self._cell_started(method, worker.batch[worker.started], now)
                    worker.said_at = now
                elif "stage" in line and line.get("case", worker.started) == worker.started:
                    worker.stage = str(line["stage"])
            if now - worker.said_at >= HEARTBEAT_S:
                worker.said_at = now
                self.notice(self._heartbeat(method, worker, now))

    def _heartbeat(self, method: str, worker: _Worker, now: float) -> str:
        since = duration(now - worker.cell_since)
        if worker.in_cell:
            label = cell_label(method, worker.batch[worker.started])
            return f"{label}: {worker.stage}… ({since} in this cell)"
        if worker.started < 0:
            return f"{method}: worker starting… ({since})"
        return f"{method}: worker between cells or ending… ({since})"

    def _cell_started(self, method: str, case: dict[str, Any], now: float) -> None:
        self.cells_started += 1
        parts = [f"cell {self.cells_started} of {self.total}"]
        peak = self.kind.peak(method, case)
        if peak is not None:
            parts.append(f"peak ~{fmt_bytes(peak)} predicted")
        left, kinds = self.time_left(now)
        if left is not None:
            parts.append(f"~{duration(left)} left" + (f" for {kinds} cells" if kinds else ""))
        self.notice(f"{cell_label(method, case)}: started ({'; '.join(parts)})")

    def time_left(self, now: float) -> tuple[float | None, str]:
        """Seconds the time model gives the cells not finished (None before any has),
        and the sides it counts when not all that remain ("" when all)."""
        spent = sum(self.spent.values())
        if spent <= 0:
            return None, ""
        known = [k for k in self.left if self.done[k] > 0]
        work = sum(max(self.left[k], 0.0) * self.spent[k] / self.done[k] for k in known)
        missing = [k for k in self.left if k not in known and self.left[k] > 0]
        return (now - self.t0) * work / spent, ", ".join(known) if missing else ""

    def finished(self, method: str, case: dict[str, Any]) -> None:
        """A measured case of ``method`` has all its rows (the harness's progress)."""
        with self.lock:
            now = self.clock()
            worker = self.workers.get(method)
            since = now if worker is None else worker.charged_since
            if worker is not None:  # between cells (or ending) until the next start line
                worker.charged_since, worker.cell_since, worker.said_at = now, now, now
                worker.in_cell = False
            side, cost = self._model(method, case)
            self.spent[side] += now - since
            self.done[side] += cost
            self.left[side] -= cost

    def worker_ended(self, method: str) -> None:
        with self.lock:
            self.workers.pop(method, None)


class Countdown:
    """Progress lines for ``total`` like items (builds): a line per finished item with its
    count, the time so far and, from the mean so far, the time left."""

    def __init__(self, total: int, notice: NoticeFn) -> None:
        self.total, self.notice = total, notice
        self.count, self.t0 = 0, time.monotonic()
        self.lock = threading.Lock()

    def done(self, label: str) -> None:
        with self.lock:
            self.count += 1
            spent = time.monotonic() - self.t0
            parts = [f"{self.count} of {self.total}", f"{duration(spent)} so far"]
            if self.count < self.total:
                parts.append(f"~{duration(spent / self.count * (self.total - self.count))} left")
            self.notice(f"{label} ({'; '.join(parts)})")
