"""Which worker runs when: natively timed methods one at a time; interpreted ones ``jobs``
at a time, beside them where memory allows, else after them. Beside them, interpreted
workers are stopped (SIGSTOP to their process groups, listed in a file both sides
``flock``) while a native worker's clock runs, and continued after."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar

from perfsuite.harness.scratch import scratch

T = TypeVar("T")


def schedule(
    items: Iterable[T],
    work: Callable[[T], None],
    *,
    interpreted: Callable[[T], bool],
    cost: Callable[[T], float],
    jobs: int,
    beside: bool,
) -> None:
    """Calls ``work`` on every item: natively timed items one at a time, and interpreted
    ones ``jobs`` at a time, costliest first, beside the native ones where ``beside``
    allows (the kind's memory says so), else after them."""
    every = list(items)
    native = [item for item in every if not interpreted(item)]
    emulated = sorted(filter(interpreted, every), key=lambda i: -cost(i))  # longest first
    if not (native and emulated and beside and jobs >= 2):
        for item in native:
            work(item)
        run_parallel(emulated, work, jobs)
        return
    sides = [  # two threads: the native workers one at a time, the interpreted ones' pool
        lambda: run_parallel(native, work, 1),
        lambda: run_parallel(emulated, work, jobs, clear=False),  # the outer pool clears
    ]
    global BOARD
    with scratch() as folder:  # the list of interpreted workers that native clocks stop
        BOARD = PauseBoard(folder)
        try:
            run_parallel(sides, lambda side: side(), 2)
        finally:
            BOARD = None


class Cancelled(Exception):
    """A worker-driving thread stopped because the run was interrupted."""


# Set when the main thread is interrupted (Ctrl-C) while threads drive workers: each
# thread kills its worker within one polling interval instead of going on.
CANCEL = threading.Event()


def run_parallel(items: list[T], work: Callable[[T], None], jobs: int, clear: bool = True) -> None:
    """``work`` on every item, ``jobs`` threads at a time (one: in this thread); an
    interrupt or a failure stops the workers of every thread, and the failure, not a
    thread's ``Cancelled``, is raised. ``clear``: start and end with ``CANCEL`` cleared
    (not when another thread of the run may set it)."""
    if jobs <= 1 or len(items) <= 1:
        for item in items:
            work(item)
        return
    if clear:
        CANCEL.clear()
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(work, item) for item in items]
            try:
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                failed = [f.exception() for f in futures if f in done and f.exception()]
                if failed:
                    raise next((e for e in failed if not isinstance(e, Cancelled)), failed[0])
            except BaseException:
                CANCEL.set()
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    finally:
        if clear:
            CANCEL.clear()  # every thread has stopped: later runs start clean


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
