"""Interpreted workers stopped (SIGSTOP to their process groups, listed in a file both
sides ``flock``) while a native worker's clock runs, continued after."""

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


def lower_priority(pid: int) -> None:
    """``BESIDE_NICE`` for the process, and for its session's autogroup where Linux has
    them (they weigh sessions against each other, whatever a process's own niceness)."""
    with suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, BESIDE_NICE)
    with suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(str(BESIDE_NICE))


@contextmanager
def paused() -> Iterator[None]:
    """In a native worker: the run's interpreted workers stopped for the block (none
    without a pause file)."""
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

    def start(
        self, popen: Callable[[dict[str, str]], subprocess.Popen], interpreted: bool
    ) -> subprocess.Popen:
        """``popen(extra environment)``: a native worker told where the list is; an
        interpreted one (its pid is its group's) listed while no native clock runs, at a
        lower priority."""
        if not interpreted:
            return popen({PAUSE_VAR: str(self.path)})
        with _locked(self.path):
            proc = popen({})
            self.path.write_text(" ".join(map(str, [*_read(self.path), proc.pid])))
        lower_priority(proc.pid)
        return proc

    def ended(self, pid: int, interpreted: bool) -> None:
        """An interpreted worker leaves the list; after a native one (killed inside
        ``paused``, it left them stopped) every listed worker continues."""
        with _locked(self.path):
            pgids = _read(self.path)
            if interpreted:
                self.path.write_text(" ".join(str(p) for p in pgids if p != pid))
            else:
                _signal(pgids, signal.SIGCONT)


# The board of the run in progress (``schedule``'s, while interpreted run beside native).
BOARD: PauseBoard | None = None
