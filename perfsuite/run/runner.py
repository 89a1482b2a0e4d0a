"""Runs a plan: one fresh worker process per method, rows collected as they land.

Isolation is per method: allocator caches, compile caches and crashes stay in
the worker. A worker that dies (segfault, OOM killer, timeout) costs the case
it was on, recorded as ``oom`` or ``error`` with the reason; the runner starts
a new worker for the cases after it, so the sweep's other results survive.

Cases the parent can decide alone (the method is unavailable on the device, or
lacks a capability the case needs) get their rows without a worker. Natively
timed methods run one at a time, so nothing competes with their clocks; Triton
methods on a CPU run under the interpreter, whose timings say nothing anyway,
and go after them ``plan.jobs`` workers at a time.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from perfsuite.measure.machine import RUN_ID_VAR
from perfsuite.measure.memory import CPU_MALLOC_ENV
from perfsuite.method import Case, Method
from perfsuite.plan.plan import Plan
from perfsuite.plan.registry import all_methods
from perfsuite.plan.workloads import workload_label
from perfsuite.results.provenance import collect_env, gpu_state
from perfsuite.results.results import PHASES, Row, new_document
from perfsuite.run.busy import watched
from perfsuite.run.scratch import scratch
from perfsuite.run.worker import WorkerSpec

# Called after each finished case: (method, case dict, rows of that case).
ProgressFn = Callable[[str, dict[str, Any], list[dict[str, Any]]], None]
T = TypeVar("T")
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def child_env(device: str, jobs: int, triton: bool) -> dict[str, str]:
    """A worker process's environment: unbuffered; on CPU the measured allocator
    settings, and for Triton methods the interpreter (set before the worker imports
    anything: ``@triton.jit`` reads it at definition) with the cores shared out."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env[RUN_ID_VAR] = str(os.getpid())  # ours, to the busy-machine check
    if device == "cpu":
        env.update(CPU_MALLOC_ENV)
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


# C++ log lines (torch profiler/kineto: "USDT:2026-01-01 10:00:00 1:1 Handler.cpp:52]
# profiler_start", glog's "W0101 10:00:00.000 1 file.cc:12] ..."): ours, not the user's.
_NATIVE_LOG = re.compile(r"\S+\.(?:cpp|cc|cxx|c|h|hpp):\d+\]")


def _user_lines(stderr: str) -> list[str]:
    """The worker's stderr without native libraries' log lines, blank lines dropped."""
    return [
        line
        for line in stderr.strip().splitlines()
        if line.strip() and not _NATIVE_LOG.search(line)
    ]


def death_reason(
    returncode: int | None, timed_out_after: float | None, stderr: str
) -> tuple[str, str]:
    """``(status, one-line reason)`` for a worker that ended without finishing its work;
    ``timed_out_after``: the limit (s) it was killed at, None if it was not."""
    tail = " | ".join(_user_lines(stderr)[-3:])[-400:]
    if timed_out_after is not None:
        return "error", f"worker timed out after {timed_out_after:g} s; {tail}".strip("; ")
    if returncode is not None and returncode < 0:
        sig = signal.Signals(-returncode).name
        if sig == "SIGKILL":
            return "oom", f"worker killed by SIGKILL (likely the kernel's OOM killer); {tail}"
        return "error", f"worker died of {sig}; {tail}"
    return "error", f"worker exited with code {returncode}; {tail}"


def run_method(
    plan: Plan,
    method: str,
    cases: list[dict[str, Any]],
    progress: ProgressFn | None = None,
    env: dict[str, str] | None = None,
    machine: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """All cases of one method, restarting the worker after a crash; ``env`` is added
    to the worker's environment (e.g. ``CUDA_VISIBLE_DEVICES`` to pin a GPU). Each
    case's machine state goes to ``machine``, and its rows say whether it was busy."""
    progress, busy = watched(plan.device, progress, machine, CASE_KEYS)
    rows = _run_method(plan, method, cases, progress, env)
    for row in rows:
        row["busy"] = busy.get(tuple(row[k] for k in CASE_KEYS), "")
    return rows


def _run_method(
    plan: Plan,
    method: str,
    cases: list[dict[str, Any]],
    progress: ProgressFn,
    env: dict[str, str] | None,
) -> list[dict[str, Any]]:
    method_obj = all_methods()[method]
    triton = method_obj.caps.triton
    rows: list[dict[str, Any]] = []
    remaining = []
    for case in cases:
        decided = _decided_rows(plan, method_obj, case)
        if decided is None:
            remaining.append(case)
            continue
        rows.extend(decided)
        if progress is not None:
            progress(method, case, decided)
    with scratch() as tmp:
        attempt = 0
        while remaining:
            attempt += 1
            out = Path(tmp) / f"rows-{attempt}.jsonl"
            spec = WorkerSpec(
                method=method,
                cases=remaining,
                out=str(out),
                phases=plan.phases,
                samples=plan.samples,
                warmup=plan.warmup,
                seed=plan.seed,
                memory_limit=plan.memory_limit,
            )
            spec_path = Path(tmp) / f"spec-{attempt}.json"
            spec_path.write_text(json.dumps(asdict(spec)))
            proc = subprocess.Popen(
                [sys.executable, "-m", "perfsuite.run.worker", str(spec_path)],
                env={**worker_env(plan, triton), **(env or {})},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            reported = 0
            deadline = time.monotonic() + plan.timeout_s
            timed_out = False
            stderr_chunks: list[str] = []
            try:
                while True:
                    try:
                        _, err = proc.communicate(timeout=0.5)
                        stderr_chunks.append(err or "")
                        break
                    except subprocess.TimeoutExpired:
                        if CANCEL.is_set():  # the run was interrupted in another thread
                            raise Cancelled(method) from None
                        if time.monotonic() > deadline:
                            timed_out = True
                            proc.kill()
                    reported = _report(out, remaining, reported, plan, method, progress)
            except BaseException:
                # Ctrl-C, SIGTERM (perfsuite.cli turns it into KeyboardInterrupt), a
                # cancel: the worker goes too, before its temporary folder is removed.
                proc.kill()
                proc.wait()
                _report(out, remaining, reported, plan, method, progress)  # its finished cases
                raise
            reported = _report(out, remaining, reported, plan, method, progress)
            lines = read_json_lines(out)
            case_rows = [line for line in lines if "start" not in line]
            rows.extend(case_rows)
            finished = reported
            if finished >= len(remaining):
                break
            # The case in flight died with the worker: record why, go on after it.
            limit = plan.timeout_s if timed_out else None
            status, reason = death_reason(proc.returncode, limit, "".join(stderr_chunks))
            lost = remaining[finished]
            have = {r["phase"] for r in case_rows if _same_case(r, lost)}
            phases = [p for p in plan.phases if p not in have]
            dead = _status_rows(method, lost, phases, status, reason)
            rows.extend(dead)
            if progress is not None:
                progress(method, lost, [r for r in case_rows if _same_case(r, lost)] + dead)
            remaining = remaining[finished + 1 :]
    return _in_case_order(rows, cases)


def _decided_rows(plan: Plan, method: Method, case: dict[str, Any]) -> list[dict[str, Any]] | None:
    """``unavailable``/``unsupported`` rows when no worker is needed to know, else None.

    The worker asks the same questions again: this only saves starting a process
    (seconds of imports) to learn what the parent already knows."""
    status, reason = "unavailable", method.availability(plan.device)
    if reason is None:
        fields = {k: v for k, v in case.items() if k not in ("shape", "workload")}
        status, reason = "unsupported", method.unsupported_reason(Case(**fields))
    if reason is None:
        return None
    return _status_rows(
        method.name, case, plan.phases, status, reason, interpreted(plan, method.name)
    )


def _status_rows(
    method: str,
    case: dict[str, Any],
    phases: list[str],
    status: str,
    reason: str,
    interpreted: bool = False,
) -> list[dict[str, Any]]:
    """Unmeasured rows of one case, one per phase, that say why."""
    return [
        asdict(
            Row(
                method=method,
                phase=p,
                status=status,
                reason=reason,
                interpreted=interpreted,
                workload=workload_label(case.get("workload")),
                **_case_fields(case),
            )
        )
        for p in phases
    ]


def interpreted(plan: Plan, method: str) -> bool:
    """Whether ``method`` runs under the Triton interpreter in this plan."""
    return plan.device == "cpu" and all_methods()[method].caps.triton


def schedule(
    plan: Plan, items: Iterable[T], method_of: Callable[[T], str], work: Callable[[T], None]
) -> None:
    """Calls ``work`` on every item: natively timed methods' items one at a time, then
    interpreted ones ``plan.jobs`` at a time (threads, each driving its own worker)."""
    native: list[T] = []
    emulated: list[T] = []
    for item in items:
        (emulated if interpreted(plan, method_of(item)) else native).append(item)
    methods = all_methods()
    emulated.sort(key=lambda i: -methods[method_of(i)].caps.interpreter_cost)  # longest first
    for item in native:
        work(item)
    if plan.jobs <= 1 or len(emulated) <= 1:
        for item in emulated:
            work(item)
        return
    run_parallel(emulated, work, plan.jobs)


class Cancelled(Exception):
    """A worker-driving thread stopped because the run was interrupted."""


# Set when the main thread is interrupted (Ctrl-C) while threads drive workers: each
# thread kills its worker within one polling interval instead of going on.
CANCEL = threading.Event()


def run_parallel(items: list[T], work: Callable[[T], None], jobs: int) -> None:
    """``work`` on every item, ``jobs`` threads at a time; an interrupt (or a failure)
    stops the workers of every thread, not only the main one's."""
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
        CANCEL.clear()  # every thread has stopped: later runs start clean


CASE_KEYS = ("shape", "tokens", "vocab", "hidden", "dtype", "beta", "softcap", "device")


def _case_fields(case: dict[str, Any]) -> dict[str, Any]:
    return {k: case[k] for k in CASE_KEYS}


def _in_case_order(rows: list[dict[str, Any]], cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows in the order of ``cases`` (decided ones came first), phases in PHASES order."""
    position = {tuple(case[k] for k in CASE_KEYS): i for i, case in enumerate(cases)}

    def key(row: dict[str, Any]) -> tuple[int, int]:
        case = position.get(tuple(row[k] for k in CASE_KEYS), len(cases))
        return case, PHASES.index(row["phase"])

    return sorted(rows, key=key)


def _same_case(row: dict[str, Any], case: dict[str, Any]) -> bool:
    return all(row[k] == v for k, v in _case_fields(case).items())


def _report(
    out: Path,
    cases: list[dict[str, Any]],
    reported: int,
    plan: Plan,
    method: str,
    progress: ProgressFn | None,
) -> int:
    """Count cases whose every phase has a row; tell ``progress`` about new ones."""
    rows = [line for line in read_json_lines(out) if "start" not in line]
    while reported < len(cases):
        case = cases[reported]
        mine = [r for r in rows if _same_case(r, case)]
        if len(mine) < len(plan.phases):
            break
        if progress is not None:
            progress(method, case, mine)
        reported += 1
    return reported


def run_plan(
    plan: Plan,
    progress: ProgressFn | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Measure every cell of ``plan``; returns the results document.

    ``checkpoint`` gets the document of every case finished so far, after each one:
    a run killed or interrupted half-way keeps what it measured."""
    methods = all_methods()
    distributions = [d for name in plan.methods for d in methods[name].distributions]
    env = collect_env(plan.device, distributions)
    env["plan"] = plan.as_dict()
    cases = plan.cases()
    by_method: dict[str, list[dict[str, Any]]] = {}
    finished: list[dict[str, Any]] = []
    lock = threading.Lock()

    def report(method: str, case: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        if progress is not None:
            progress(method, case, rows)
        if checkpoint is not None:
            with lock:
                finished.extend(rows)
                checkpoint(new_document({**env, "partial": True}, list(finished)))

    groups: list[dict[str, Any]] = []
    env["machine"] = {"groups": groups}

    def work(method: str) -> None:
        by_method[method] = run_method(plan, method, cases, report, machine=groups)

    schedule(plan, plan.methods, lambda m: m, work)
    rows = [row for method in plan.methods for row in by_method[method]]
    if plan.device == "cuda":
        env["gpu_state_after"] = gpu_state()
    return new_document(env, rows)
