"""One worker process's life: started in its own process group (so a kill reaches its
ranks and compile workers too), its JSON-lines file polled every ``POLL_S`` and handed to
the caller, killed (the whole group) at its deadline or when the run is interrupted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.harness import pause
from perfsuite.harness.deaths import read_json_lines
from perfsuite.harness.schedule import CANCEL, Cancelled

POLL_S = 0.5
# Called with every line the worker wrote so far; True when a case finished since the
# last call (a per-case deadline starts again).
LinesFn = Callable[[list[dict[str, Any]]], bool]


def python_worker(module: str, *args: str) -> list[str]:
    """The command that serves ``module``'s ``WORKER`` (``perfsuite.harness.worker.main``)
    in a fresh Python, the collector off until the worker freezes what its imports made
    (``freeze_what_exists``): its passes over torch's and transformers' objects as they
    import cost 0.3-2 s a worker."""
    boot = "import gc, sys; gc.disable(); from perfsuite.harness.worker import main; "
    boot += "sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", boot, module, *args]


@dataclass
class Ended:
    """How a worker ended: its exit code, the limit it was killed at (None if it was
    not), its stderr."""

    returncode: int | None
    timed_out_after: float | None
    stderr: str


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
    its start, or with ``per_case`` from its last finished case). Ctrl-C, SIGTERM
    (``perfsuite.cli`` turns it into KeyboardInterrupt) and a cancel of the run kill
    the worker's group before re-raising, so it is gone before its scratch folder."""
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

        board = pause.BOARD
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
