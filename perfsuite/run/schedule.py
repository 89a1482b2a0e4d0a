"""Which worker runs when: natively timed methods one at a time, so nothing competes
with their clocks; Triton methods on a CPU run under the interpreter, whose timings say
nothing anyway, ``plan.jobs`` workers at a time beside them, stopped whenever a native
worker's clock runs (``perfsuite.run.pause``), or after them where memory is short.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import TypeVar

from perfsuite.plan.memory_model import device_capacity, predicted_peak
from perfsuite.plan.plan import Plan
from perfsuite.plan.registry import methods_for
from perfsuite.run import pause
from perfsuite.run.scratch import scratch

T = TypeVar("T")


def interpreted(plan: Plan, method: str) -> bool:
    """Whether ``method`` runs under the Triton interpreter in this plan."""
    return plan.device == "cpu" and methods_for(bool(plan.tps))[method].caps.triton


def schedule(
    plan: Plan, items: Iterable[T], method_of: Callable[[T], str], work: Callable[[T], None]
) -> None:
    """Calls ``work`` on every item: natively timed methods' items one at a time, and
    interpreted ones ``plan.jobs`` at a time (threads, each driving its own worker),
    beside the native ones where ``overlap`` allows, else after them."""
    native: list[T] = []
    emulated: list[T] = []
    for item in items:
        (emulated if interpreted(plan, method_of(item)) else native).append(item)
    methods = methods_for(bool(plan.tps))
    emulated.sort(key=lambda i: -methods[method_of(i)].caps.interpreter_cost)  # longest first
    if native and emulated and overlap(plan):
        _beside(native, emulated, work, plan.jobs)
        return
    for item in native:
        work(item)
    if plan.jobs <= 1 or len(emulated) <= 1:
        for item in emulated:
            work(item)
        return
    run_parallel(emulated, work, plan.jobs)


def overlap(plan: Plan) -> bool:
    """Whether interpreted workers may run beside native ones: a one-device CPU run (a
    multi-rank cell's ranks keep the machine), ``--jobs`` 2 or more (1 keeps every
    worker alone), and memory, by the memory model, for a native worker and
    ``plan.jobs`` interpreted ones at once."""
    if plan.device != "cpu" or plan.tps or plan.jobs < 2:
        return False
    capacity = device_capacity("cpu")
    if capacity is None:
        return True
    softcap = plan.softcap is not None
    need = max(
        predicted_peak("eager", True, s.tokens, s.vocab, s.hidden, dtype, softcap)[0]
        for s in plan.shapes
        for dtype in plan.dtypes_for(s)
    )
    return (1 + plan.jobs) * need <= capacity


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
