"""The loss cell kind: a plan's cases measured by ``perfsuite.run.worker`` processes (one
per method: caches and crashes kept apart), or across ranks by ``perfsuite.run.launch``."""

from __future__ import annotations

import itertools
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.harness import kind as harness
from perfsuite.harness.lifecycle import python_worker
from perfsuite.harness.progress import NoticeFn, ProgressFn
from perfsuite.measure.timing import sampling
from perfsuite.method import SimpleMethod
from perfsuite.plan.memory_model import device_capacity, exceeds, gate_bytes, predicted_peak
from perfsuite.plan.plan import Plan
from perfsuite.plan.registry import all_methods
from perfsuite.results.provenance import collect_env
from perfsuite.results.recorded import grads_in_forward_record
from perfsuite.run.worker import CASE_KEYS, WorkerSpec

if TYPE_CHECKING:
    from perfsuite.harness.command import Checkpoint


def measured(plan: Plan) -> dict[str, SimpleMethod]:
    """Name -> what the plan's cells measure: across ranks a method's ``tp`` declaration
    (the method itself where it declares none: its cells are decided unsupported)."""
    tp = bool(plan.tps)
    return {n: (m.across_ranks() if tp else None) or m for n, m in all_methods().items()}


class LossKind(harness.Kind):
    """A loss cell: one worker per method (a launcher of K ranks across ranks)."""

    case_keys = CASE_KEYS

    def __init__(self, plan: Plan, attempt_all: bool = True) -> None:
        self.plan, self.device, self.jobs = plan, plan.device, plan.jobs
        # Bytes over which a cell is predicted not to fit (None: ``--attempt-all``, unknown).
        self.capacity = None if attempt_all else device_capacity(plan.device, plan.memory_limit)
        self.name = "tp" if plan.tps else "loss"  # the kind of cell, on every row
        self.timeout_s, self.phases = plan.timeout_s, tuple(plan.phases)
        self.methods = measured(plan)

    def predicted(self, method: str, case: dict[str, Any]) -> tuple[int, str] | None:
        """``memory_model.predicted_peak``: bytes and what they hold (None across ranks)."""
        if case.get("tp"):
            return None
        return predicted_peak(
            self.methods[method].caps, case["tokens"], case["vocab"], case["hidden"],
            case["dtype"], case.get("softcap") is not None,
        )  # fmt: skip

    def peak(self, method: str, case: dict[str, Any]) -> int | None:
        predicted = self.predicted(method, case)
        return None if predicted is None else predicted[0]

    def wont_fit(self, method: str, case: dict[str, Any]) -> str | None:
        """Over ``capacity`` by the memory model (``--attempt-all``: no capacity)."""
        predicted = None if self.capacity is None else self.predicted(method, case)
        if predicted is None or predicted[0] <= self.capacity:
            return None
        need, what = predicted
        return exceeds(need, what, self.capacity, self.device) + "; --attempt-all attempts it"

    def work(self, method: str, case: dict[str, Any]) -> float:
        """Matmul FLOPs of the correctness gate and of every sample, plus a fixed cost."""
        interpreted = self.interpreted(method)
        how = sampling(self.plan.samples, self.plan.warmup, interpreted)
        # The memory pass, and a timing pass unless the memory pass's call is the sample.
        samples = 1 if how.cpu_time else how.samples + how.warmup + 1
        per_phase = {"fwd": 2, "bwd": 6, "fwd+bwd": 8}
        flops = case["tokens"] * case["vocab"] * case["hidden"]
        flops *= 24 + sum(per_phase[p] for p in self.phases) * samples
        return flops * (50 if interpreted else 1) + 1e10

    def beside(self) -> bool:
        """A one-device CPU run, with memory by the model for a native worker and
        ``plan.jobs`` interpreted ones at once."""
        plan = self.plan
        if plan.device != "cpu" or plan.tps:
            return False
        capacity = device_capacity("cpu")
        if capacity is None:
            return True
        need = max(  # every worker runs the gate
            gate_bytes(s.tokens, s.vocab, s.hidden, dtype, plan.softcap is not None)
            for s in plan.shapes
            for dtype in plan.dtypes_for(s)
        )
        return (1 + plan.jobs) * need <= capacity

    def batch(self, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A multi-rank worker's cases: those of one TP size."""
        tp = cases[0].get("tp")
        return list(itertools.takewhile(lambda c: c.get("tp") == tp, cases))

    def command(self, method: str, cases: list[dict[str, Any]], out: Path, spec: Path) -> list[str]:
        p = self.plan
        fields = (p.phases, p.samples, p.warmup, p.seed, p.memory_limit, p.collective_timeout_s)
        fields += (p.timer, p.profile)
        spec.write_text(json.dumps(asdict(WorkerSpec(method, cases, str(out), *fields))))
        if cases[0].get("tp") is None:
            return python_worker("perfsuite.run.worker", str(spec))
        return [sys.executable, "-m", "perfsuite.run.launch", str(spec)]  # it starts K ranks


def run_plan(
    plan: Plan,
    progress: ProgressFn | None = None,
    checkpoint: Checkpoint | None = None,
    notice: NoticeFn | None = None,
    attempt_all: bool = True,
) -> dict[str, Any]:
    """Every cell of ``plan`` measured (``harness.measure``); the results document."""
    kind, env = LossKind(plan, attempt_all), plan_env(plan)
    return harness.measure(kind, plan.methods, plan.cases(), env, progress, checkpoint, notice)


def plan_env(plan: Plan) -> dict[str, Any]:
    """The results' ``env`` of ``plan``: provenance (its methods' packages) and the plan."""
    methods = measured(plan)
    env = collect_env(plan.device, [d for n in plan.methods for d in methods[n].distributions])
    env["plan"] = plan.as_dict()
    if not plan.tps:  # the loss tables' ‡, for a reader without torch (report)
        env["grads_in_forward"] = grads_in_forward_record(methods, plan.methods, plan.betas)
    return env
