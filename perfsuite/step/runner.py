"""The step cell kind: a step plan's cases measured by ``perfsuite.step.worker``
processes, through the harness. The parent decides alone what it can, a model the
memory estimate says cannot fit included (``oom``, nothing started)."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import asdict
from pathlib import Path
from typing import Any

from perfsuite.harness import kind as harness
from perfsuite.harness.busy import ProgressFn
from perfsuite.harness.lifecycle import python_worker
from perfsuite.harness.progress import Model, NoticeFn, Tracker
from perfsuite.method import SimpleMethod
from perfsuite.plan.registry import methods_for
from perfsuite.results.provenance import collect_env, gpu_state
from perfsuite.results.results import STEP_PHASES, new_document
from perfsuite.run.runner import in_case_order
from perfsuite.step.cases import CASE_KEYS, case_rows, case_size
from perfsuite.step.estimate import estimate, too_big
from perfsuite.step.methods import availability, case_reason
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

    name, phases, case_keys = "step", STEP_PHASES, CASE_KEYS

    def __init__(self, plan: StepPlan, models: dict[str, Any]) -> None:
        self.plan, self.device, self.timeout_s = plan, plan.device, plan.timeout_s
        self.models = models
        self.methods = methods_for("step")

    def decided(self, method: str, case: dict[str, Any]) -> list[dict] | None:
        """The rows of a case no worker is needed for (unavailable, unsupported, oom)."""
        m, plan = self.methods[method], self.plan
        status, reason = "unavailable", availability(m, plan.device)
        if reason is None:
            status, reason = "unsupported", case_reason(m, case)
        if reason is None:
            est = _estimate(m, case, plan.device)
            status, reason = "oom", too_big(est, plan.capacity, plan.capacity_source)
        if reason is None:
            return None
        return self.status_rows(method, case, STEP_PHASES, status, reason)

    def interpreted(self, method: str) -> bool:
        return self.methods[method].caps.triton and self.device == "cpu"

    def command(self, method: str, cases: list[dict[str, Any]], out: Path, spec: Path) -> list[str]:
        p = self.plan
        limit = p.memory_limit if p.device == "cpu" else None
        worker = StepSpec(method, cases, str(out), p.samples, p.warmup, p.seed, limit)
        spec.write_text(json.dumps(asdict(worker)))
        return python_worker("perfsuite.step.worker", str(spec))

    def status_rows(
        self, method: str, case: dict[str, Any], phases: Collection[str], status: str, reason: str
    ) -> list[dict[str, Any]]:
        rows = case_rows(case, self.methods[method], status=status, reason=reason)
        return [asdict(r) for r in rows if r.phase in phases]

    def heard(self, method: str, lines: list[dict[str, Any]]) -> None:
        for line in lines:
            if "model" in line:
                self.models.setdefault(line["model"], line["info"])


def _estimate(method: SimpleMethod, case: dict[str, Any], device: str) -> Any:
    preset = get_preset(case["shape"])
    return estimate(method.caps.holds.kind, preset, case_size(case), case["dtype"], device)


def _tracker(kind: StepKind, cases: list[dict[str, Any]], notice: NoticeFn) -> Tracker:
    """Progress lines over the cases a worker will measure (``run``'s, from
    ``perfsuite.harness.progress``): a step's cost as 6 x parameters x tokens, weighted
    by a method's interpreter cost where it is interpreted; the memory estimate's peak."""
    plan = kind.plan
    units = [(m, case) for m in plan.methods for case in cases if kind.decided(m, case) is None]

    def cost(name: str, case: dict[str, Any]) -> float:
        size = case_size(case)
        flops = 6.0 * get_preset(case["shape"]).parameters(size.layers) * size.tokens
        return flops * (kind.methods[name].caps.interpreter_cost if kind.interpreted(name) else 1)

    def peak(name: str, case: dict[str, Any]) -> int | None:
        return _estimate(kind.methods[name], case, plan.device).need

    kinds = {True: "interpreted", False: "native"}
    return Tracker(units, notice, Model(cost, lambda name: kinds[kind.interpreted(name)], peak))


def run_step_plan(
    plan: StepPlan,
    progress: ProgressFn | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    notice: NoticeFn | None = None,
) -> dict[str, Any]:
    """Measure every (method, case) of ``plan``; returns the results document.
    ``notice``: the progress lines while workers run (a model's step may take minutes)."""
    methods = methods_for("step")
    distributions = [d for name in plan.methods for d in methods[name].distributions]
    env = collect_env(plan.device, ["transformers", *distributions])
    env["plan"] = plan.as_dict()
    models: dict[str, Any] = {}
    estimates: dict[str, Any] = {}
    cases = plan.cases()
    for case in cases:
        per_method = estimates.setdefault(case["shape"], {}).setdefault(case["dtype"], {})
        for name in plan.methods:
            per_method[name] = _estimate(methods[name], case, plan.device).as_dict()
    env["step"] = {
        "optimizer": f"torch.optim.AdamW(lr={LR:g}), torch's defaults otherwise",
        "loss_share": LOSS_SHARE,
        "models": models,
        "memory_estimates": estimates,
    }
    groups: list[dict[str, Any]] = []
    env["machine"] = {"groups": groups}
    kind = StepKind(plan, models)
    tracker = None if notice is None else _tracker(kind, cases, notice)
    report = harness.checkpointed(env, progress, checkpoint, tracker)
    by_method = harness.run_kind(kind, {m: cases for m in plan.methods}, report, groups, tracker)
    order = [in_case_order(by_method[m], cases, CASE_KEYS, STEP_PHASES) for m in plan.methods]
    rows = [row for rows in order for row in rows]
    if plan.device == "cuda":
        env["gpu_state_after"] = gpu_state()
    return new_document(env, rows)
