"""Runs a plan: one fresh worker process per method, rows collected as they land.

Isolation is per method: allocator caches, compile caches and crashes stay in
the worker. A worker that dies (segfault, OOM killer, timeout) costs the case
it was on, recorded as ``oom`` or ``error`` with the reason; the runner starts
a new worker for the cases after it, so the sweep's other results survive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from perfsuite.measure.memory import CPU_MALLOC_ENV
from perfsuite.plan import Plan
from perfsuite.provenance import collect_env, gpu_state
from perfsuite.registry import all_methods
from perfsuite.results import Row, new_document
from perfsuite.worker import WorkerSpec
from perfsuite.workloads import workload_label

# Called after each finished case: (method, case dict, rows of that case).
ProgressFn = Callable[[str, dict[str, Any], list[dict[str, Any]]], None]


def worker_env(plan: Plan, triton: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if plan.device == "cpu":
        env.update(CPU_MALLOC_ENV)
        if triton:
            env["TRITON_INTERPRET"] = "1"
    return env


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = []
    for text in path.read_text().splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            break  # a line cut by a crash: everything before it stands
    return lines


def _death_reason(returncode: int | None, timed_out: bool, stderr: str) -> tuple[str, str]:
    tail = " | ".join(stderr.strip().splitlines()[-3:])[-400:]
    if timed_out:
        return "error", f"worker timed out; {tail}".strip("; ")
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
) -> list[dict[str, Any]]:
    """All cases of one method, restarting the worker after a crash; ``env`` is added
    to the worker's environment (e.g. ``CUDA_VISIBLE_DEVICES`` to pin a GPU)."""
    triton = all_methods()[method].caps.triton
    rows: list[dict[str, Any]] = []
    remaining = list(cases)
    with tempfile.TemporaryDirectory(prefix="perfsuite-") as tmp:
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
                [sys.executable, "-m", "perfsuite.worker", str(spec_path)],
                env={**worker_env(plan, triton), **(env or {})},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            reported = 0
            deadline = time.monotonic() + plan.timeout_s
            timed_out = False
            stderr_chunks: list[str] = []
            while True:
                try:
                    _, err = proc.communicate(timeout=0.5)
                    stderr_chunks.append(err or "")
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() > deadline:
                        timed_out = True
                        proc.kill()
                reported = _report(out, remaining, reported, plan, method, progress)
            reported = _report(out, remaining, reported, plan, method, progress)
            lines = _read_lines(out)
            case_rows = [line for line in lines if "start" not in line]
            rows.extend(case_rows)
            finished = reported
            if finished >= len(remaining):
                break
            # The case in flight died with the worker: record why, go on after it.
            status, reason = _death_reason(proc.returncode, timed_out, "".join(stderr_chunks))
            lost = remaining[finished]
            have = {r["phase"] for r in case_rows if _same_case(r, lost)}
            dead = [
                asdict(
                    Row(
                        method=method,
                        phase=p,
                        status=status,
                        reason=reason,
                        workload=workload_label(lost.get("workload")),
                        **_case_fields(lost),
                    )
                )
                for p in plan.phases
                if p not in have
            ]
            rows.extend(dead)
            if progress is not None:
                progress(method, lost, [r for r in case_rows if _same_case(r, lost)] + dead)
            remaining = remaining[finished + 1 :]
    return rows


def _case_fields(case: dict[str, Any]) -> dict[str, Any]:
    return {
        k: case[k]
        for k in ("shape", "tokens", "vocab", "hidden", "dtype", "beta", "softcap", "device")
    }


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
    rows = [line for line in _read_lines(out) if "start" not in line]
    while reported < len(cases):
        case = cases[reported]
        mine = [r for r in rows if _same_case(r, case)]
        if len(mine) < len(plan.phases):
            break
        if progress is not None:
            progress(method, case, mine)
        reported += 1
    return reported


def run_plan(plan: Plan, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Measure every cell of ``plan``; returns the results document."""
    methods = all_methods()
    distributions = [d for name in plan.methods for d in methods[name].distributions]
    env = collect_env(plan.device, distributions)
    env["plan"] = plan.as_dict()
    rows: list[dict[str, Any]] = []
    cases = plan.cases()
    for method in plan.methods:
        rows.extend(run_method(plan, method, cases, progress))
    if plan.device == "cuda":
        env["gpu_state_after"] = gpu_state()
    return new_document(env, rows)
