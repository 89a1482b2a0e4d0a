"""A worker process's environment: what it is timed under, set before it imports
anything (libgomp, glibc's malloc and ``@triton.jit`` read their variables once).

OpenMP's wait policy (issue 30): torch's CPU ops run on libgomp threads that, by
default, spin for a while at every barrier. With another process on one of two cores,
a spinning thread keeps its core from looking idle, so its partner thread waits
behind the other process for a time slice, at every op: ours' torch engine (many
small ops over vocab slices) ran ~190x slower there, eager (a few large ops) 1.7x.
``PASSIVE`` threads sleep at once, the idle core takes the waiting thread, and on a
quiet machine the wake-ups cost microseconds (reports/cpu-busy/).
"""

from __future__ import annotations

import os

from perfsuite.measure.machine import RUN_ID_VAR
from perfsuite.measure.memory import CPU_MALLOC_ENV
from perfsuite.plan.plan import Plan

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# Every CPU worker's, unless the caller's environment already chose one.
CPU_THREAD_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def child_env(device: str, jobs: int, triton: bool) -> dict[str, str]:
    """A worker process's environment: unbuffered; on CPU the measured allocator
    settings and OpenMP's wait policy, and for Triton methods the interpreter (set
    before the worker imports anything: ``@triton.jit`` reads it at definition) with
    the cores shared out."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env[RUN_ID_VAR] = str(os.getpid())  # ours, to the busy-machine check
    if device == "cpu":
        env.update(CPU_MALLOC_ENV)
        for var, value in CPU_THREAD_ENV.items():
            env.setdefault(var, value)
        if not triton:  # a native method is timed natively, whatever this process runs
            env.pop("TRITON_INTERPRET", None)
        if triton:
            env["TRITON_INTERPRET"] = "1"
            if jobs > 1:  # share the cores instead of oversubscribing them
                threads = str(max(1, len(os.sched_getaffinity(0)) // jobs))
                for var in THREAD_VARS:  # torch's pool, and numpy's BLAS under tl.dot
                    env.setdefault(var, threads)
    return env


def worker_env(plan: Plan, triton: bool) -> dict[str, str]:
    return child_env(plan.device, plan.jobs, triton)
