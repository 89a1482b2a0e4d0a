"""The harness's worker lifecycle, once for every cell kind: a tiny kind whose worker is
a short ``python -c`` script (no torch, well under a second) drives the same loop the
loss, step and train kinds plug into."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from perfsuite.harness.kind import Kind, run_cases, run_kind
from perfsuite.harness.schedule import CANCEL, Cancelled, run_parallel
from perfsuite.harness.scratch import PREFIX

pytestmark = pytest.mark.integration

# Per case: "start" and a row, or a death. "hang" starts a grandchild first (its pid in
# the case's "pids" file), as a launcher starts ranks, then never finishes.
WORKER = """
import json, os, signal, subprocess, sys, time
spec = json.load(open(sys.argv[1]))
with open(spec["out"], "a", buffering=1) as out:
    for i, case in enumerate(spec["cases"]):
        out.write(json.dumps({"start": i}) + "\\n")
        action = case["action"]
        if action == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if action == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "hang":
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
            with open(case["pids"], "w") as f:
                f.write(f"{os.getpid()} {child.pid}")
            time.sleep(120)
        if action == "nap":
            time.sleep(1.5)
        out.write(json.dumps({"n": case["n"], "status": "ok", "pid": os.getpid()}) + "\\n")
"""


class Tiny(Kind):
    """One phase per case; a case with action "unsupported" is decided without a worker."""

    phases = ("x",)

    def __init__(self, timeout_s: float = 60.0, per_case: bool = False) -> None:
        self.timeout_s, self.per_case = timeout_s, per_case
        self.commands = 0

    def decided(self, method: str, case: dict[str, Any]) -> list[dict[str, Any]] | None:
        if case["action"] != "unsupported":
            return None
        return [{"n": case["n"], "status": "unsupported", "reason": "decided"}]

    def command(self, method: str, cases: list, out: Path, spec: Path) -> list[str]:
        self.commands += 1
        spec.write_text(json.dumps({"out": str(out), "cases": cases}))
        return [sys.executable, "-c", WORKER, str(spec)]

    def finished(self, lines: list[dict[str, Any]], cases: list) -> list:
        return [[ln] for ln in lines if "status" in ln]

    def lost(self, method, case, index, lines, status, reason) -> list:  # noqa: ANN001
        return [{"n": case["n"], "status": status, "reason": reason}]


def case(n: int, action: str = "ok", **extra: Any) -> dict[str, Any]:
    size = {"tokens": 1, "vocab": 2, "hidden": 3, "dtype": "fp32", "beta": 0.0}
    return {"n": n, "action": action, **size, **extra}


def gone(pid: int, within_s: float = 5.0) -> bool:
    """Exited within ``within_s`` (SIGKILL to a group is delivered, not awaited: a
    grandchild may still be on its way out; a zombie waiting for its reaper counts)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def by_case(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {row["n"]: row for row in rows}


def test_a_crash_costs_only_its_case_and_the_next_runs_in_a_new_worker():
    kind = Tiny()
    heard = []
    cases = [case(0), case(1, "crash"), case(2, "unsupported"), case(3, "killed"), case(4)]
    rows = run_kind(kind, {"m": cases}, lambda m, c, r: heard.append(c["n"]))["m"]
    got = by_case(rows)
    assert [got[n]["status"] for n in range(5)] == ["ok", "error", "unsupported", "oom", "ok"]
    assert "SIGSEGV" in got[1]["reason"]
    assert "SIGKILL" in got[3]["reason"] and "OOM killer" in got[3]["reason"]
    assert kind.commands == 3  # the decided case started none; each death a new one
    assert got[0]["pid"] != got[4]["pid"]
    assert heard == [2, 0, 1, 3, 4]  # decided first, then each as it ends
    # Measured cases carry the machine's state over them; the others were not measured.
    assert "busy" in got[0] and "busy" in got[4] and "busy" not in got[1]


@pytest.mark.parametrize("per_case", [False, True])
def test_a_timeout_kills_the_whole_process_group_and_starts_again(tmp_path, per_case):
    """A worker's limit (run, step: its cases add up) or each case's (a converge run,
    starting again after each finished case); a new worker takes the case after it."""
    pids = tmp_path / "pids"
    cases = [case(0, "nap"), case(1, "nap"), case(2, "hang", pids=str(pids)), case(3)]
    got = by_case(run_cases(Tiny(2.5, per_case), "m", cases))
    statuses = [got[n]["status"] for n in range(4)]
    assert statuses == ["ok", "ok" if per_case else "error", "error", "ok"]  # naps: 1.5 s
    assert "timed out after 2.5 s" in got[2]["reason"]
    worker, grandchild = map(int, pids.read_text().split())
    assert gone(worker) and gone(grandchild)


@pytest.mark.parametrize("how", ["cancel", "ctrl-c", "in another thread"])
def test_an_interrupt_leaves_no_worker_and_no_scratch_folder(tmp_path, how):
    """At once, not after the worker's two minutes; "in another thread": Ctrl-C (here a
    failure) in one thread of a parallel run kills the other thread's worker too."""
    pids = tmp_path / "pids"
    cases = [case(0), case(1, "hang", pids=str(pids))]
    rows: list[dict[str, Any]] = []

    def interrupt() -> None:
        deadline = time.monotonic() + 60
        while not pids.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        if how == "cancel":
            CANCEL.set()  # another thread of the run was interrupted
        elif how == "ctrl-c":
            os.kill(os.getpid(), signal.SIGINT)
        else:
            raise KeyboardInterrupt

    def measure(item: str = "measure") -> None:
        if item != "measure":
            return interrupt()
        run_cases(Tiny(), "m", cases, lambda m, c, r: rows.extend(r))

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    start = time.monotonic()
    try:
        with pytest.raises(Cancelled if how == "cancel" else KeyboardInterrupt):
            if how == "in another thread":
                run_parallel(["measure", "interrupt"], measure, jobs=2)
            threading.Thread(target=interrupt, daemon=True).start()
            measure()
    finally:
        signal.signal(signal.SIGINT, previous)
        assert not CANCEL.is_set() or how == "cancel"  # the next run is not cancelled
        CANCEL.clear()
    assert time.monotonic() - start < 15
    worker, grandchild = map(int, pids.read_text().split())
    assert gone(worker) and gone(grandchild)
    assert [r["n"] for r in rows] == [0]  # what finished before it was reported
    assert not list(Path(tempfile.gettempdir()).glob(f"{PREFIX}{os.getpid()}-*"))
