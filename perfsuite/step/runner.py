"""The step cell kind: a step plan's cases measured by ``perfsuite.step.worker``
processes, through the harness (``perfsuite.harness``), as ``perfsuite run``'s.

The parent decides alone what it can (a method unavailable here, a case it does not
support, a model the memory estimate says cannot fit: ``oom`` with the estimate as
reason, nothing started); a worker measures the rest of a method's cases, and one that
dies costs the case it was on. Every finished case is checkpointed to the results file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from perfsuite.harness import kind as harness
from perfsuite.harness.busy import ProgressFn
from perfsuite.results.provenance import collect_env, gpu_state
from perfsuite.results.results import STEP_PHASES, new_document
from perfsuite.step.cases import CASE_KEYS, case_rows, case_size, same_case
from perfsuite.step.estimate import estimate, too_big
from perfsuite.step.methods import StepMethod, step_methods
from perfsuite.step.plan import StepPlan
from perfsuite.step.presets import get_preset
from perfsuite.step.worker import LR, StepSpec

LOSS_SHARE = (
    "loss_ms: median over samples of the step's fwd+bwd, less the median fwd+bwd of the "
    "same model in the same worker with a trivial loss on the decoder's last hidden states "
    "(mean of their squares; compiled alike for torch-compile); the share is loss_ms over "
    "the step's median. The optimizer is the same work for every loss and is left out."
)


class StepKind(harness.Kind):
    """A training step of a model: one worker per method, four phases per case."""

    phases = STEP_PHASES

    def __init__(self, plan: StepPlan, models: dict[str, Any]) -> None:
        self.plan, self.device, self.timeout_s, self.models = (
            plan,
            plan.device,
            plan.timeout_s,
            models,
        )
        self.methods: dict[str, StepMethod] = step_methods()

    def decided(self, method: str, case: dict[str, Any]) -> list[dict] | None:
        """The rows of a case no worker is needed for (unavailable, unsupported, oom)."""
        m, plan = self.methods[method], self.plan
        preset = get_preset(case["shape"])
        reason = m.availability(plan.device)
        decided = None if reason is None else ("unavailable", reason)
        if decided is None:
            decided = m.case_reason(preset, case["dtype"], case["beta"], plan.device)
        if decided is None:
            est = estimate(m.holds, preset, case_size(case), case["dtype"], plan.device)
            reason = too_big(est, plan.capacity, plan.capacity_source)
            decided = None if reason is None else ("oom", reason)
        if decided is None:
            return None
        return [asdict(r) for r in case_rows(case, m, status=decided[0], reason=decided[1])]

    def interpreted(self, method: str) -> bool:
        return self.methods[method].triton and self.device == "cpu"

    def command(self, method: str, cases: list[dict[str, Any]], out: Path, spec: Path) -> list[str]:
        p = self.plan
        limit = p.memory_limit if p.device == "cpu" else None
        worker = StepSpec(method, cases, str(out), p.samples, p.warmup, p.seed, limit)
        spec.write_text(json.dumps(asdict(worker)))
        return [sys.executable, "-m", "perfsuite.step.worker", str(spec)]

    def finished(self, lines: list[dict[str, Any]], cases: list[dict[str, Any]]) -> list:
        rows = [ln for ln in lines if "phase" in ln]
        return harness.finished_by_phase(rows, cases, same_case, len(STEP_PHASES))

    def lost(
        self, method: str, case: dict[str, Any], index: int, lines: list, status: str, reason: str
    ) -> list[dict[str, Any]]:
        kept = [ln for ln in lines if "phase" in ln and same_case(ln, case)]
        have = {ln["phase"] for ln in kept}
        dead = case_rows(case, self.methods[method], status=status, reason=reason)
        return kept + [asdict(r) for r in dead if r.phase not in have]

    def heard(self, method: str, lines: list[dict[str, Any]]) -> None:
        for line in lines:
            if "model" in line:
                self.models.setdefault(line["model"], line["info"])


def run_step_plan(
    plan: StepPlan,
    progress: ProgressFn | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Measure every (method, case) of ``plan``; returns the results document."""
    methods = step_methods()
    distributions = [d for name in plan.methods for d in methods[name].decl.distributions]
    env = collect_env(plan.device, ["transformers", *distributions])
    env["plan"] = plan.as_dict()
    models: dict[str, Any] = {}
    estimates: dict[str, Any] = {}
    for case in plan.cases():
        preset = get_preset(case["shape"])
        for name in plan.methods:
            est = estimate(methods[name].holds, preset, case_size(case), case["dtype"], plan.device)
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
    report = harness.checkpointed(env, progress, checkpoint)
    cases = plan.cases()
    by_method = harness.run_kind(
        StepKind(plan, models), {m: cases for m in plan.methods}, report, groups
    )
    order = {tuple(c[k] for k in CASE_KEYS): i for i, c in enumerate(cases)}

    def key(row: dict[str, Any]) -> tuple[int, int]:
        return order[tuple(row[k] for k in CASE_KEYS)], STEP_PHASES.index(row["phase"])

    rows = [row for m in plan.methods for row in sorted(by_method[m], key=key)]
    if plan.device == "cuda":
        env["gpu_state_after"] = gpu_state()
    return new_document(env, rows)
