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
    ones ``jobs`` at a time, costliest first (threads, each driving its own worker),
    beside the native ones where ``beside`` allows (the kind's memory says so), else
    after them."""
    every = list(items)
    native = [item for item in every if not interpreted(item)]
    emulated = sorted(filter(interpreted, every), key=lambda i: -cost(i))  # longest first
    if native and emulated and beside and jobs >= 2:
        _beside(native, emulated, work, jobs)
        return
    for item in native:
        work(item)
    if jobs <= 1 or len(emulated) <= 1:
        for item in emulated:
            work(item)
        return
    run_parallel(emulated, work, jobs)


def _beside(native: list[T], emulated: list[T], work: Callable[[T], None], jobs: int) -> None:
    """Native items in this thread, interpreted ones in a pool beside it, under one
    pause board; an interrupt or a failure on either side stops both."""
    failed: list[BaseException] = []
    # Waited on instead of Thread.join: a Ctrl-C inside join() can mark a running
    # thread stopped (CPython 3.11), and a later join() would not wait for it.
    side_done = threading.Event()

    def interpreted_side() -> None:
        try:
            run_parallel(emulated, work, jobs, clear=False)
        except BaseException as err:  # noqa: BLE001 - handed to the main thread
            failed.append(err)
            CANCEL.set()  # the native side stops too
        finally:
            side_done.set()

    CANCEL.clear()
    with scratch() as folder:
        pause.BOARD = pause.PauseBoard(folder)
        side = threading.Thread(target=interpreted_side, name="interpreted", daemon=True)
        side.start()
        try:
            for item in native:
                if CANCEL.is_set():
                    break
                work(item)
            while not side_done.wait(0.5):  # a Ctrl-C meanwhile lands in this try
                pass
        except BaseException as err:
            CANCEL.set()  # every worker of both sides is killed within a poll
            side_done.wait()
            real = [e for e in failed if not isinstance(e, Cancelled)]
            if isinstance(err, Cancelled) and real:  # the interpreted side failed first
                raise real[0] from None
            raise
        finally:
            pause.BOARD = None
            CANCEL.clear()
    real = [err for err in failed if not isinstance(err, Cancelled)]
    if real:
        raise real[0]


class Cancelled(Exception):
    """A worker-driving thread stopped because the run was interrupted."""


# Set when the main thread is interrupted (Ctrl-C) while threads drive workers: each
# thread kills its worker within one polling interval instead of going on.
CANCEL = threading.Event()


def run_parallel(items: list[T], work: Callable[[T], None], jobs: int, clear: bool = True) -> None:
    """``work`` on every item, ``jobs`` threads at a time; an interrupt (or a failure)
    stops the workers of every thread, not only the main one's. ``clear``: start and
    end with ``CANCEL`` cleared (not when another thread of the run may set it)."""
    if clear:
        CANCEL.clear()
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(work, item) for item in items]
            try:
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                failed = [f.exception() for f in futures if f in done and f.exception()]
                if failed:
                    raise failed[0]
            except BaseException:
                CANCEL.set()
                for future in futures:
                    future.cancel()
                raise
    finally:
        if clear:
            CANCEL.clear()  # every thread has stopped: later runs start clean
