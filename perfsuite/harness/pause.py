"""Interpreted workers paused while a natively timed worker's clock runs.

On a CPU, Triton methods run under the interpreter, whose timings say nothing, so they
run beside the native workers, and a native worker stops them (SIGSTOP to each one's
process group) for its timing passes and continues them after (SIGCONT): its imports,
compilation, gate and memory passes overlap with interpreted work, its clock never does.
Native workers run one at a time (two at once made the smoke run slower: each one's
OpenMP threads spin at barriers while the other's hold the cores). The interpreted
workers' groups are listed in a file (``PAUSE_VAR`` names it to native workers) whose
``flock`` both sides hold, so no interpreted worker starts while a native clock runs.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

PAUSE_VAR = "PERFSUITE_PAUSE_FILE"
# Niceness of an interpreted worker beside native ones: a native worker's untimed work
# (imports, gate, memory passes: the run's critical path) comes first on a shared core.
BESIDE_NICE = 10
# Seconds to wait for a stopped process to be seen stopped (it is within microseconds).
STOP_WAIT_S = 2.0


@contextmanager
def _locked(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # releases the lock


def _read(path: Path) -> list[int]:
    try:
        return [int(x) for x in path.read_text().split()]
    except (OSError, ValueError):
        return []


def _signal(pgids: list[int], sig: signal.Signals) -> list[int]:
    """``sig`` to each process group; the groups that still exist."""
    alive = []
    for pgid in pgids:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
            alive.append(pgid)
    return alive


def _stopped(pid: int) -> bool:
    """Stopped (``T``) or gone: either way it runs no more."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t", "Z", "X")


def lower_priority(pid: int, nice: int = BESIDE_NICE) -> None:
    """``nice`` for the process, and for its session's autogroup where Linux has them
    (they weigh sessions against each other, whatever a process's own niceness)."""
    with suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    with suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))


@contextmanager
def paused() -> Iterator[None]:
    """In a native worker: the run's interpreted workers stopped for the block (no-op
    when the harness named no pause file: nothing runs beside this worker)."""
    name = os.environ.get(PAUSE_VAR)
    if not name:
        yield
        return
    with _locked(Path(name)):
        pgids = _signal(_read(Path(name)), signal.SIGSTOP)
        deadline = time.monotonic() + STOP_WAIT_S
        while not all(_stopped(p) for p in pgids) and time.monotonic() < deadline:
            time.sleep(0.001)
        try:
            yield
        finally:
            _signal(pgids, signal.SIGCONT)


class PauseBoard:
    """The harness's side: the file of interpreted workers' process groups."""

    def __init__(self, folder: str) -> None:
        self.path = Path(folder) / "interpreted.pgids"
        self.path.touch()

    def env(self) -> dict[str, str]:
        """What a native worker's environment adds."""
        return {PAUSE_VAR: str(self.path)}

    def start(self, popen: Callable[[], subprocess.Popen]) -> subprocess.Popen:
        """Start an interpreted worker (its own session: its pid is its group's), list
        it while no native clock runs, and give way to native workers' CPU use."""
        with _locked(self.path):
            proc = popen()
            self.path.write_text(" ".join(map(str, [*_read(self.path), proc.pid])))
        lower_priority(proc.pid)
        return proc

    def forget(self, pid: int) -> None:
        with _locked(self.path):
            self.path.write_text(" ".join(str(p) for p in _read(self.path) if p != pid))

    def resume_all(self) -> None:
        """After a native worker ended: one killed inside ``paused`` left them stopped."""
        with _locked(self.path):
            _signal(_read(self.path), signal.SIGCONT)


# The board of the run in progress (set by ``schedule`` while interpreted workers run
# beside native ones), read by the harness when it starts a worker.
BOARD: PauseBoard | None = None


def start_worker(
    popen: Callable[[dict[str, str]], subprocess.Popen], interpreted: bool
) -> subprocess.Popen:
    """``popen(extra environment)`` as the run's board wants it: an interpreted worker
    listed (so native clocks stop it), a native one told where the list is."""
    board = BOARD
    if board is None:
        return popen({})
    if interpreted:
        return board.start(lambda: popen({}))
    return popen(board.env())


def worker_ended(proc: subprocess.Popen, interpreted: bool) -> None:
    """An interpreted worker leaves the list; after a native one, all continue."""
    board = BOARD
    if board is None:
        return
    if interpreted:
        board.forget(proc.pid)
    else:
        board.resume_all()
