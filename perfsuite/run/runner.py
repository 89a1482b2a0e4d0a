"""Runs a plan: one fresh worker process per method, rows collected as they land.

Isolation is per method: allocator caches, compile caches and crashes stay in
the worker. A worker that dies (segfault, OOM killer, timeout) costs the case
it was on, recorded as ``oom`` or ``error`` with the reason; the runner starts
a new worker for the cases after it, so the sweep's other results survive.

Cases the parent can decide alone (the method is unavailable on the device, or
lacks a capability the case needs) get their rows without a worker. Natively
timed methods run one at a time, so nothing competes with their clocks; Triton
methods on a CPU run under the interpreter, whose timings say nothing anyway,
``plan.jobs`` workers at a time beside them, stopped while a native clock runs
(``perfsuite.run.schedule``, ``perfsuite.run.pause``).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from subprocess import Popen
from typing import Any

from perfsuite.method import Method
from perfsuite.plan.memory_model import predicted_peak
from perfsuite.plan.plan import Plan
from perfsuite.plan.registry import all_methods, methods_for, tp_methods
from perfsuite.plan.workloads import workload_label
from perfsuite.results.provenance import collect_env, gpu_state
from perfsuite.results.results import PHASES, Row, new_document
from perfsuite.run.busy import watched
from perfsuite.run.deaths import death_reason, failed_record, read_json_lines
from perfsuite.run.environment import THREAD_VARS as THREAD_VARS
from perfsuite.run.environment import child_env as child_env
from perfsuite.run.environment import worker_env
from perfsuite.run.grid import Unit, unit_cost
from perfsuite.run.pause import start_worker, worker_ended
from perfsuite.run.progress import Model, NoticeFn, Tracker, row_lines
from perfsuite.run.schedule import CANCEL, Cancelled, interpreted, schedule
from perfsuite.run.schedule import run_parallel as run_parallel
from perfsuite.run.scratch import scratch
from perfsuite.run.worker import WorkerSpec
from perfsuite.tp_method import case_reason

# Called after each finished case: (method, case dict, rows of that case).
ProgressFn = Callable[[str, dict[str, Any], list[dict[str, Any]]], None]


def run_method(
    plan: Plan,
    method: str,
    cases: list[dict[str, Any]],
    progress: ProgressFn | None = None,
    env: dict[str, str] | None = None,
    machine: list[dict[str, Any]] | None = None,
    tracker: Tracker | None = None,
) -> list[dict[str, Any]]:
    """All cases of one method, restarting the worker after a crash; ``env`` is added
    to the worker's environment (e.g. ``CUDA_VISIBLE_DEVICES`` to pin a GPU). Each
    case's machine state goes to ``machine``, and its rows say whether it was busy;
    ``tracker`` hears the workers' starts and stages (progress lines)."""
    progress, busy = watched(plan.device, progress, machine, CASE_KEYS)
    rows = _run_method(plan, method, cases, progress, env, tracker)
    for row in rows:
        row["busy"] = busy.get(tuple(row.get(k) for k in CASE_KEYS), "")
    return rows


def _run_method(
    plan: Plan,
    method: str,
    cases: list[dict[str, Any]],
    progress: ProgressFn,
    env: dict[str, str] | None,
    tracker: Tracker | None = None,
) -> list[dict[str, Any]]:
    method_obj = method_named(method, cases)
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
            # A multi-rank worker starts K ranks for one TP size: cases of the next go
            # to the next worker.
            tp = remaining[0].get("tp")
            batch = list(itertools.takewhile(lambda c, tp=tp: c.get("tp") == tp, remaining))
            spec = WorkerSpec(
                method=method,
                cases=batch,
                out=str(out),
                phases=plan.phases,
                samples=plan.samples,
                warmup=plan.warmup,
                seed=plan.seed,
                memory_limit=plan.memory_limit,
                collective_timeout_s=plan.collective_timeout_s,
            )
            spec_path = Path(tmp) / f"spec-{attempt}.json"
            spec_path.write_text(json.dumps(asdict(spec)))
            command = [sys.executable, "-m", worker_module(tp), str(spec_path)]
            environ = {**worker_env(plan, triton), **(env or {})}

            def popen(extra: dict[str, str], command=command, environ=environ) -> Popen:
                return subprocess.Popen(
                    command,
                    env={**environ, **extra},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    # Its own process group: a kill reaches a multi-rank worker's ranks too.
                    start_new_session=True,
                )

            proc = start_worker(popen, triton)
            if tracker is not None:
                tracker.worker_started(method, batch)
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
                            _kill(proc)
                    lines = read_json_lines(out)
                    reported = _report(lines, batch, reported, plan, method, progress)
                    if tracker is not None:
                        tracker.poll(method, lines)
            except BaseException:
                # Ctrl-C, SIGTERM (perfsuite.cli turns it into KeyboardInterrupt), a
                # cancel: the worker goes too, before its temporary folder is removed.
                _kill(proc)
                proc.wait()
                # its finished cases
                _report(read_json_lines(out), batch, reported, plan, method, progress)
                raise
            finally:
                worker_ended(proc, triton)
                if tracker is not None:
                    tracker.worker_ended(method)
            _kill(proc)  # a rank its launcher left behind
            lines = read_json_lines(out)
            reported = _report(lines, batch, reported, plan, method, progress)
            case_rows = row_lines(lines)
            rows.extend(case_rows)
            finished = reported
            if finished >= len(batch):
                remaining = remaining[len(batch) :]
                continue
            # The case in flight died with the worker: record why, go on after it.
            limit = plan.timeout_s if timed_out else None
            status, reason = failed_record(lines) or death_reason(
                proc.returncode, limit, "".join(stderr_chunks)
            )
            lost = remaining[finished]
            have = {r["phase"] for r in case_rows if _same_case(r, lost)}
            phases = [p for p in plan.phases if p not in have]
            dead = _status_rows(method, lost, phases, status, reason)
            rows.extend(dead)
            if progress is not None:
                progress(method, lost, [r for r in case_rows if _same_case(r, lost)] + dead)
            remaining = remaining[finished + 1 :]
    return _in_case_order(rows, cases)


def _kill(proc: Popen) -> None:
    """SIGKILL the worker's whole process group (a launcher and its ranks)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def worker_module(tp: int | None) -> str:
    """The module a worker runs: one process, or a launcher of ``tp`` ranks."""
    return "perfsuite.run.worker" if tp is None else "perfsuite.run.launch"


def method_named(name: str, cases: list[dict[str, Any]]) -> Method:
    """The method of that name: from the TP registry for multi-rank cases."""
    if any(case.get("tp") is not None for case in cases):
        return tp_methods()[name]
    return all_methods()[name]


def _decided_rows(plan: Plan, method: Method, case: dict[str, Any]) -> list[dict[str, Any]] | None:
    """``unavailable``/``unsupported`` rows when no worker is needed to know, else None.

    The worker asks the same questions again: this only saves starting a process
    (seconds of imports) to learn what the parent already knows."""
    status, reason = "unavailable", method.availability(plan.device)
    if reason is None:
        status, reason = "unsupported", case_reason(method, case)
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


CASE_KEYS = ("shape", "tokens", "vocab", "hidden", "dtype", "beta", "softcap", "device", "tp")


def _case_fields(case: dict[str, Any]) -> dict[str, Any]:
    return {k: case.get(k) for k in CASE_KEYS}


def _in_case_order(rows: list[dict[str, Any]], cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows in the order of ``cases`` (decided ones came first), phases in PHASES order."""
    position = {tuple(case.get(k) for k in CASE_KEYS): i for i, case in enumerate(cases)}

    def key(row: dict[str, Any]) -> tuple[int, int]:
        case = position.get(tuple(row.get(k) for k in CASE_KEYS), len(cases))
        return case, PHASES.index(row["phase"])

    return sorted(rows, key=key)


def _same_case(row: dict[str, Any], case: dict[str, Any]) -> bool:
    return all(row[k] == v for k, v in _case_fields(case).items())


def _report(
    lines: list[dict[str, Any]],
    cases: list[dict[str, Any]],
    reported: int,
    plan: Plan,
    method: str,
    progress: ProgressFn | None,
) -> int:
    """Count cases whose every phase has a row; tell ``progress`` about new ones."""
    rows = row_lines(lines)
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
    notice: NoticeFn | None = None,
) -> dict[str, Any]:
    """Measure every cell of ``plan``; returns the results document.

    ``checkpoint`` gets the document of every case finished so far, after each one:
    a run killed or interrupted half-way keeps what it measured. ``notice`` gets a
    line when a worker or a cell starts, and at least every ``HEARTBEAT_S`` while a
    cell runs (perfsuite.run.progress)."""
    methods = methods_for(bool(plan.tps))
    distributions = [d for name in plan.methods for d in methods[name].distributions]
    env = collect_env(plan.device, distributions)
    env["plan"] = plan.as_dict()
    cases = plan.cases()
    by_method: dict[str, list[dict[str, Any]]] = {}
    finished: list[dict[str, Any]] = []
    lock = threading.Lock()
    tracker = None if notice is None else _tracker(plan, cases, notice)

    def report(method: str, case: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        if tracker is not None and any(r["status"] in ("ok", "wrong") for r in rows):
            tracker.finished(method, case)
        if progress is not None:
            progress(method, case, rows)
        if checkpoint is not None:
            with lock:
                finished.extend(rows)
                checkpoint(new_document({**env, "partial": True}, list(finished)))

    groups: list[dict[str, Any]] = []
    env["machine"] = {"groups": groups}

    def work(method: str) -> None:
        by_method[method] = run_method(plan, method, cases, report, machine=groups, tracker=tracker)

    schedule(plan, plan.methods, lambda m: m, work)
    rows = [row for method in plan.methods for row in by_method[method]]
    if plan.device == "cuda":
        env["gpu_state_after"] = gpu_state()
    return new_document(env, rows)


def _tracker(plan: Plan, cases: list[dict[str, Any]], notice: NoticeFn) -> Tracker:
    """Progress lines over the cells a worker will measure (not those decided here):
    ``grid.unit_cost`` as the time model, ``memory_model.predicted_peak`` as the
    memory one (per device: none for cells across ranks)."""
    units = [
        (name, case)
        for name in plan.methods
        for case in cases
        if _decided_rows(plan, method_named(name, [case]), case) is None
    ]
    emulated = {name: interpreted(plan, name) for name in plan.methods}
    methods = methods_for(bool(plan.tps))

    def cost(name: str, case: dict[str, Any]) -> float:
        # Interpreted methods differ by far more than FLOPs: their declared relative cost.
        weight = methods[name].caps.interpreter_cost if emulated[name] else 1.0
        return weight * unit_cost(Unit(0, name, case), plan, emulated[name])

    def peak(name: str, case: dict[str, Any]) -> int | None:
        if case.get("tp"):
            return None
        materializes = getattr(methods[name].caps, "materializes_logits", True)
        return predicted_peak(
            name, materializes, case["tokens"], case["vocab"], case["hidden"],
            case["dtype"], case.get("softcap") is not None,
        )[0]  # fmt: skip

    kind = {True: "interpreted", False: "native"}
    return Tracker(units, notice, Model(cost, lambda name: kind[emulated[name]], peak))
