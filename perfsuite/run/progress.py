"""Progress lines while a run measures: a method's worker starting, each cell starting,
and a heartbeat at least every ``HEARTBEAT_S`` while a cell runs.

Issue 30: ``run --shape gemma2-2b --tokens 256`` printed nothing for 420 s, its first
cell's length. Workers write ``{"stage": ...}`` lines (the gate, each phase's memory
and timing pass) between their rows; the runner polls that file anyway and hands the
lines here. A cell's start line carries the memory model's predicted peak, and once a
cell has finished, the time left by ``grid.unit_cost`` calibrated on the cells done.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perfsuite.plan.memory_model import predicted_peak
from perfsuite.plan.plan import Plan

# Seconds a running cell may go without a line.
HEARTBEAT_S = 30.0
# Lines of a worker's output that are not rows: a case's start, a stage, a launcher's
# failure record.
MARKERS = ("start", "stage", "failed")

NoticeFn = Callable[[str], None]


def row_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows among a worker's output lines."""
    return [line for line in lines if not any(k in line for k in MARKERS)]


def duration(seconds: float) -> str:
    """``45 s``, ``3 min 20 s``, ``1 h 05 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def cell_label(method: str, case: dict[str, Any]) -> str:
    tp = f" TP={case['tp']}" if case.get("tp") else ""
    return (
        f"{method + tp:<22} {case['shape']} N={case['tokens']} {case['dtype']} β={case['beta']:g}"
    )


def _peak(method: str, materializes: bool, case: dict[str, Any]) -> str:
    if case.get("tp"):
        return ""  # the model is per device; ranks split the problem
    need, _ = predicted_peak(
        method, materializes, case["tokens"], case["vocab"], case["hidden"],
        case["dtype"], case.get("softcap") is not None,
    )  # fmt: skip
    size = f"{need / 2**30:.1f} GiB" if need >= 2**30 else f"{need / 2**20:.0f} MiB"
    return f"peak ~{size} predicted"


@dataclass
class _Worker:
    """What the tracker last said about one method's running worker."""

    batch: list[dict[str, Any]]
    started: int = -1  # index in ``batch`` of the case in flight
    stage: str = "starting"
    cell_since: float = 0.0
    said_at: float = 0.0


class Tracker:
    """Turns worker output into progress lines (``notice``); shared by the threads
    that drive interpreted workers, hence the lock."""

    def __init__(
        self,
        plan: Plan,
        units: list[tuple[str, dict[str, Any]]],
        notice: NoticeFn,
        cost: Callable[[str, dict[str, Any]], float],
        materializes: Callable[[str], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan, self.notice, self.cost, self.clock = plan, notice, cost, clock
        self.materializes = materializes
        self.total = len(units)
        self.total_cost = sum(cost(m, c) for m, c in units) or 1.0
        self.done_cost = 0.0
        self.cells_started = 0
        self.t0 = clock()
        self.workers: dict[str, _Worker] = {}
        self.lock = threading.Lock()

    def worker_started(self, method: str, batch: list[dict[str, Any]]) -> None:
        with self.lock:
            now = self.clock()
            self.workers[method] = _Worker(list(batch), cell_since=now, said_at=now)
            self.notice(f"{method}: worker starting ({len(batch)} cell(s) to measure)")

    def poll(self, method: str, lines: list[dict[str, Any]]) -> None:
        """Called with the worker's whole output at every poll of the runner."""
        with self.lock:
            worker = self.workers.get(method)
            if worker is None:
                return
            now = self.clock()
            for line in lines:
                if "start" in line and line["start"] > worker.started:
                    worker.started, worker.stage, worker.cell_since = line["start"], "gate", now
                    if worker.started < len(worker.batch):
                        self._cell_started(method, worker.batch[worker.started], now)
                    worker.said_at = now
                elif "stage" in line and line.get("case", worker.started) == worker.started:
                    worker.stage = str(line["stage"])
            if now - worker.said_at >= HEARTBEAT_S:
                worker.said_at = now
                self.notice(self._heartbeat(method, worker, now))

    def _heartbeat(self, method: str, worker: _Worker, now: float) -> str:
        if 0 <= worker.started < len(worker.batch):
            label = cell_label(method, worker.batch[worker.started])
            return f"{label}: {worker.stage}… ({duration(now - worker.cell_since)} in this cell)"
        return f"{method}: worker {worker.stage}… ({duration(now - worker.cell_since)})"

    def _cell_started(self, method: str, case: dict[str, Any], now: float) -> None:
        self.cells_started += 1
        parts = [f"cell {self.cells_started} of {self.total}"]
        peak = _peak(method, self.materializes(method), case)
        if peak:
            parts.append(peak)
        if self.done_cost > 0:
            rate = (now - self.t0) / self.done_cost
            left = max(self.total_cost - self.done_cost, 0.0) * rate
            parts.append(f"~{duration(left)} left by the time model")
        self.notice(f"{cell_label(method, case)}: started ({'; '.join(parts)})")

    def finished(self, method: str, case: dict[str, Any]) -> None:
        """A measured case of ``method`` has all its rows (the runner's progress)."""
        with self.lock:
            self.done_cost += self.cost(method, case)

    def worker_ended(self, method: str) -> None:
        with self.lock:
            self.workers.pop(method, None)
