"""One worker process's life: started in its own process group (a kill reaches its ranks
and compile workers too), its JSON lines polled every ``POLL_S``, the group killed at its
deadline or when the run is interrupted; and why it ended, from what it left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.harness import schedule
from perfsuite.harness.schedule import CANCEL, Cancelled

POLL_S = 0.5
# Called with every line the worker wrote so far; True when a case finished since the
# last call (a per-case deadline starts again).
LinesFn = Callable[[list[dict[str, Any]]], bool]


def python_worker(module: str, *args: str) -> list[str]:
    """The command that serves ``module``'s ``WORKER`` (``perfsuite.harness.worker.main``),
    the collector off until the worker freezes what its imports made: its passes over
    torch's objects as they import cost 0.3-2 s a worker."""
    boot = "import gc, sys; gc.disable(); from perfsuite.harness.worker import main; "
    boot += "sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", boot, module, *args]


# C++ log lines (torch profiler/kineto: "USDT:2026-01-01 10:00:00 1:1 Handler.cpp:52]
# profiler_start", glog's "W0101 10:00:00.000 1 file.cc:12] ..."): ours, not the user's.
_NATIVE_LOG = re.compile(r"\S+\.(?:cpp|cc|cxx|c|h|hpp):\d+\]")


@dataclass
class Ended:
    """How a worker ended."""

    returncode: int | None
    timed_out_after: float | None  # the limit it was killed at
    stderr: str

    def death_reason(self) -> tuple[str, str]:
        """``(status, one-line reason)`` for a worker that ended without finishing its work."""
        said = [ln for ln in self.stderr.strip().splitlines() if ln.strip()]
        said = [ln for ln in said if not _NATIVE_LOG.search(ln)]
        tail = " | ".join(said[-3:])[-400:]
        if self.timed_out_after is not None:
            return "error", f"worker timed out after {self.timed_out_after:g} s; {tail}".strip("; ")
        code = self.returncode
        if code is not None and code < 0:
            sig = signal.Signals(-code).name
            if sig == "SIGKILL":
                return "oom", f"worker killed by SIGKILL (likely the kernel's OOM killer); {tail}"
            return "error", f"worker died of {sig}; {tail}"
        return "error", f"worker exited with code {code}; {tail}"


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the worker's whole process group (a launcher and its ranks)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def run_worker(
    command: list[str],
    env: dict[str, str],
    out: Path,
    timeout_s: float,
    on_lines: LinesFn,
    interpreted: bool = False,
    per_case: bool = False,
) -> Ended:
    """Run ``command`` until it exits, polling ``out``; killed past ``timeout_s`` (from
    its start, or with ``per_case`` from its last finished case). Ctrl-C, SIGTERM and a
    cancel of the run kill the worker's group before re-raising (before its scratch
    folder goes)."""
    stderr_path = out.with_suffix(".stderr")
    timed_out = None
    with open(stderr_path, "w") as stderr:

        def popen(extra: dict[str, str]) -> subprocess.Popen:
            return subprocess.Popen(
                command,
                env={**env, **extra},
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )

        board = schedule.BOARD
        proc = popen({}) if board is None else board.start(popen, interpreted)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    proc.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if on_lines(read_json_lines(out)) and per_case:
                    deadline = time.monotonic() + timeout_s
                if CANCEL.is_set():  # the run was interrupted in another thread
                    raise Cancelled(command[-1])
                if time.monotonic() > deadline:
                    timed_out = timeout_s
                    kill_group(proc)
        except BaseException:
            kill_group(proc)
            proc.wait()
            on_lines(read_json_lines(out))  # its finished cases stand
            raise
        finally:
            if board is not None:
                board.ended(proc.pid, interpreted)
    kill_group(proc)  # a rank or child it left behind
    on_lines(read_json_lines(out))
    return Ended(proc.returncode, timed_out, stderr_path.read_text())


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """A worker's JSON-lines output, up to the first line a crash cut short."""
    if not path.exists():
        return []
    lines = []
    for text in path.read_text().splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            break  # a line cut by a crash: everything before it stands
    return lines


def failed_record(lines: list[dict[str, Any]]) -> tuple[str, str] | None:
    """``(status, reason)`` of the multi-rank launcher's ``{"failed": i, ...}`` line (the
    rank that failed first and why), when it wrote one."""
    for line in reversed(lines):
        if "failed" in line:
            return str(line["status"]), str(line["reason"])
    return None
