"""Which worker runs when: natively timed methods one at a time; interpreted ones ``jobs``
at a time, beside them (paused by their clocks) where memory allows, else after them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import TypeVar

from perfsuite.harness import pause
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
    with scratch() as folder:  # the list of interpreted workers that native clocks stop
        pause.BOARD = pause.PauseBoard(folder)
        try:
            run_parallel(sides, lambda side: side(), 2)
        finally:
            pause.BOARD = None


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
                for future in futures:
                    future.cancel()
                raise
    finally:
        if clear:
            CANCEL.clear()  # every thread has stopped: later runs start clean
