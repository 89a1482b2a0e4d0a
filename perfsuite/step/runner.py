"""Runs a step plan: one fresh worker process per method, rows collected as they land.

``perfsuite run``'s pattern (``perfsuite.run.runner``): the parent decides alone what
it can (a method unavailable here, a case it does not support, a model the memory
estimate says cannot fit: ``oom`` with the estimate as reason, nothing started), and
starts ``python -m perfsuite.step.worker`` for the rest, one method at a time so that
nothing competes with its clocks. A worker that dies (segfault, OOM killer, timeout)
costs the case it was on, recorded as ``oom`` or ``error``; a new worker takes the
cases after it. Every finished case is checkpointed to the results file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from perfsuite.results.provenance import collect_env, gpu_state
from perfsuite.results.results import STEP_PHASES, new_document
from perfsuite.run.busy import watched
from perfsuite.run.deaths import death_reason, read_json_lines
from perfsuite.run.runner import CANCEL, Cancelled, child_env
from perfsuite.run.scratch import scratch
from perfsuite.step.cases import CASE_KEYS, case_rows, case_size, same_case
from perfsuite.step.estimate import estimate, too_big
from perfsuite.step.methods import METHODS
from perfsuite.step.plan import StepPlan
from perfsuite.step.presets import get_preset
from perfsuite.step.worker import LR, StepSpec

ProgressFn = Callable[[str, dict[str, Any], list[dict[str, Any]]], None]
POLL_S = 0.5
LOSS_SHARE = (
    "loss_ms: median over samples of the step's fwd+bwd, less the median fwd+bwd of the "
    "same model in the same worker with a trivial loss on the decoder's last hidden states "
    "(mean of their squares; compiled alike for torch-compile); the share is loss_ms over "
    "the step's median. The optimizer is the same work for every loss and is left out."
)


def decided_rows(plan: StepPlan, method: str, case: dict[str, Any]) -> list[dict] | None:
    """The rows of a case no worker is needed for (unavailable, unsupported, oom)."""
    m = METHODS[method]
    preset = get_preset(case["shape"])
    status_reason = None
    reason = m.availability(plan.device)
    if reason is not None:
        status_reason = ("unavailable", reason)
    else:
        status_reason = m.case_reason(preset, case["dtype"], case["beta"], plan.device)
    if status_reason is None:
        est = estimate(m.holds, preset, case_size(case), case["dtype"], plan.device)
        reason = too_big(est, plan.capacity, plan.capacity_source)
        if reason is not None:
            status_reason = ("oom", reason)
    if status_reason is None:
        return None
    status, reason = status_reason
    return [asdict(r) for r in case_rows(case, m, status=status, reason=reason)]


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _finished(lines: list[dict[str, Any]], cases: list[dict[str, Any]]) -> int:
    """How many of ``cases`` have all their rows in the worker's ``lines``."""
    rows = [ln for ln in lines if "phase" in ln]
    done = 0
    for case in cases:
        if sum(same_case(r, case) for r in rows) < len(STEP_PHASES):
            break
        done += 1
    return done


def run_worker(
    plan: StepPlan,
    method: str,
    cases: list[dict[str, Any]],
    tmp: Path,
    attempt: int,
    on_case: Callable[[dict[str, Any], list[dict[str, Any]]], None],
    on_line: Callable[[dict[str, Any]], None],
) -> int:
    """One worker over ``cases``; calls ``on_case`` per finished case; returns how many
    finished. A death leaves the case in flight to the caller."""
    out = tmp / f"{method}-{attempt}.jsonl"
    spec = StepSpec(method, cases, str(out), plan.samples, plan.warmup, plan.seed)
    spec.memory_limit = plan.memory_limit if plan.device == "cpu" else None
    spec_path = tmp / f"{method}-{attempt}.json"
    spec_path.write_text(json.dumps(asdict(spec)))
    stderr_path = tmp / f"{method}-{attempt}.stderr"
    reported, timed_out = 0, False
    deadline = time.monotonic() + plan.timeout_s
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "perfsuite.step.worker", str(spec_path)],
            env=child_env(plan.device, 1, METHODS[method].triton),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,  # a kill reaches what it started (compile workers)
        )
        try:
            while True:
                try:
                    proc.wait(timeout=POLL_S)
                    done = True
                except subprocess.TimeoutExpired:
                    done = False
                lines = read_json_lines(out)
                for line in lines:
                    if "model" in line:
                        on_line(line)
                now = _finished(lines, cases)
                for case in cases[reported:now]:
                    on_case(case, [ln for ln in lines if "phase" in ln and same_case(ln, case)])
                reported = now
                if done:
                    break
                if CANCEL.is_set():
                    raise Cancelled(method)
                if time.monotonic() > deadline:
                    timed_out = True
                    _kill(proc)
        except BaseException:
            _kill(proc)  # Ctrl-C, SIGTERM: the worker goes before its folder does
            proc.wait()
            raise
    _kill(proc)
    if reported < len(cases):
        status, reason = death_reason(
            proc.returncode, plan.timeout_s if timed_out else None, stderr_path.read_text()
        )
        lost = cases[reported]
        kept = [ln for ln in read_json_lines(out) if "phase" in ln and same_case(ln, lost)]
        have = {ln["phase"] for ln in kept}
        dead = case_rows(lost, METHODS[method], status=status, reason=reason)
        on_case(lost, kept + [asdict(r) for r in dead if r.phase not in have])
        reported += 1
    return reported


def run_method(
    plan: StepPlan,
    method: str,
    progress: ProgressFn,
    machine: list[dict[str, Any]],
    on_line: Callable[[dict[str, Any]], None],
) -> list[dict[str, Any]]:
    """Every case of one method: decided ones at once, then workers until all are done."""
    marked, _ = watched(plan.device, progress, machine, CASE_KEYS)
    rows: list[dict[str, Any]] = []

    def on_case(case: dict[str, Any], case_rows_: list[dict[str, Any]]) -> None:
        rows.extend(case_rows_)
        marked(method, case, case_rows_)

    remaining = []
    for case in plan.cases():
        decided = decided_rows(plan, method, case)
        if decided is None:
            remaining.append(case)
        else:
            on_case(case, decided)
    with scratch() as tmp:
        attempt = 0
        while remaining:
            attempt += 1
            finished = run_worker(plan, method, remaining, Path(tmp), attempt, on_case, on_line)
            remaining = remaining[finished:]
    order = {tuple(c[k] for k in CASE_KEYS): i for i, c in enumerate(plan.cases())}
    return sorted(
        rows,
        key=lambda r: (order[tuple(r[k] for k in CASE_KEYS)], STEP_PHASES.index(r["phase"])),
    )


def run_step_plan(
    plan: StepPlan,
    progress: ProgressFn | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Measure every (method, case) of ``plan``; returns the results document."""
    distributions = [d for name in plan.methods for d in METHODS[name].distributions]
    env = collect_env(plan.device, ["transformers", *distributions])
    env["plan"] = plan.as_dict()
    models: dict[str, Any] = {}
    estimates: dict[str, Any] = {}
    for case in plan.cases():
        preset = get_preset(case["shape"])
        for name in plan.methods:
            est = estimate(METHODS[name].holds, preset, case_size(case), case["dtype"], plan.device)
            estimates.setdefault(preset.name, {}).setdefault(case["dtype"], {})[name] = (
                est.as_dict()
            )
    env["step"] = {
        "optimizer": f"torch.optim.AdamW(lr={LR:g}), torch's defaults otherwise",
        "loss_share": LOSS_SHARE,
        "models": models,
        "memory_estimates": estimates,
    }
    groups: list[dict[str, Any]] = []
    env["machine"] = {"groups": groups}
    finished: list[dict[str, Any]] = []

    def report(method: str, case: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        finished.extend(rows)
        if progress is not None:
            progress(method, case, rows)
        if checkpoint is not None:
            checkpoint(new_document({**env, "partial": True}, list(finished)))

    def on_line(line: dict[str, Any]) -> None:
        models.setdefault(line["model"], line["info"])

    rows = []
    for method in plan.methods:
        rows += run_method(plan, method, report, groups, on_line)
    if plan.device == "cuda":
        env["gpu_state_after"] = gpu_state()
    return new_document(env, rows)
