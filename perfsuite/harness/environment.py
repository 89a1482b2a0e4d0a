"""A worker process's environment, set before it imports anything (libgomp, glibc's malloc
and ``@triton.jit`` read their variables once; docs/run.md, reports/cpu-busy/)."""

from __future__ import annotations

import os
import threading
import time

from perfsuite.measure.machine import BUSY_CORES, RUN_ID_VAR, Snapshot, other_cores

# Freed buffers leave the process: its measured high-water mark follows the tensors.
CPU_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# What a CPU worker started on a busy machine adds (unless the caller set it already).
BUSY_THREAD_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
# The shortest window the busy check reads the machine's CPU use over.
PROBE_S = 0.25


class _Probe:
    """Whether processes other than this run's used the cores since the last look
    (at least ``PROBE_S`` ago: the first look waits that long)."""

    def __init__(self) -> None:
        self.last: Snapshot | None = None
        self.busy = False
        self.lock = threading.Lock()

    def __call__(self) -> bool:
        with self.lock:
            if self.last is None:
                self.last = Snapshot()
                time.sleep(PROBE_S)
            now = Snapshot()
            elapsed = now.wall - self.last.wall
            if elapsed >= PROBE_S:
                self.busy = other_cores(self.last, now, elapsed) >= BUSY_CORES
                self.last = now
            return self.busy


machine_busy = _Probe()


def child_env(device: str, jobs: int, triton: bool, busy: bool | None = None) -> dict[str, str]:
    """A worker process's environment: unbuffered; on CPU the measured allocator
    settings, OpenMP's wait policy (passive on a ``busy`` machine: looked at when None),
    and for Triton methods the interpreter with the cores shared out."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env[RUN_ID_VAR] = str(os.getpid())  # ours, to the busy-machine check
    if device == "cpu":
        env.update(CPU_MALLOC_ENV)
        if not triton:  # a native method is timed natively, whatever this process runs
            env.pop("TRITON_INTERPRET", None)
            if machine_busy() if busy is None else busy:
                env = {**BUSY_THREAD_ENV, **env}  # unless the caller set them already
        else:
            env["TRITON_INTERPRET"] = "1"
            if jobs > 1:  # share the cores instead of oversubscribing them
                threads = str(max(1, len(os.sched_getaffinity(0)) // jobs))
                # torch's pool, and numpy's BLAS under tl.dot
                env = {**dict.fromkeys(THREAD_VARS, threads), **env}
    return env
