"""``perfsuite step``'s arguments to the cases to measure, checked by the shared planner
(``perfsuite.plan.plan``) before anything runs: a bad value is a ``PlanError`` naming its flag."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from perfsuite.plan.memory_model import capacity_for
from perfsuite.plan.plan import (
    Plan,
    parse_betas,
    parse_dtypes,
    parse_list,
    resolve_device,
    resolve_methods,
)
from perfsuite.results.results import STEP_PHASES
from perfsuite.step.presets import Size, StepPreset, get_preset, size_for

DTYPES = ("fp32", "bf16")
# What identifies a case in a row (the busy-machine marks are keyed by it).
CASE_KEYS = ("shape", "dtype", "beta", "workload")
# ``env.plan`` of the results: what ``merge`` and ``compare`` check agree, and the rest.
RECORDED = ("methods", "dtypes", "betas", "device", "samples", "warmup", "seed")
RECORDED += ("memory_limit", "timeout_s", "capacity", "capacity_source")


def case_size(case: dict[str, Any]) -> Size:
    return Size(layers=case["layers"], seq=case["seq"], batch=case["batch"])


@dataclass
class StepPlan(Plan):
    """The shared ``Plan`` with the models a step trains, at their sizes (``shapes`` stays
    empty: a step's N, V and D are its model's)."""

    presets: list[StepPreset] = field(default_factory=list)
    sizes: dict[str, Size] = field(default_factory=dict)
    # Bytes a worker may plan on, and what bounds it (for the skipped rows' reasons).
    capacity: int | None = None
    capacity_source: str = ""

    def cases(self) -> list[dict[str, Any]]:
        """Every (model, dtype, β) in table order, as a worker's case: its rows' fields
        (N is batch x seq, V and D the model's: the loss-only cell of the same last
        layer) and the model's size."""
        cases = []
        for p in self.presets:
            size = self.sizes[p.name]
            model = dict(shape=p.name, **vars(size), tokens=size.tokens, vocab=p.vocab)
            model.update(hidden=p.hidden, workload=size.label(), softcap=p.softcap)
            cases += [
                {**model, "dtype": dtype, "beta": beta, "device": self.device}
                for dtype in self.dtypes
                for beta in self.betas
            ]
        return cases

    def as_dict(self) -> dict[str, Any]:
        models = [p.name for p in self.presets]
        sizes = {name: vars(size) for name, size in self.sizes.items()}
        rest = {k: getattr(self, k) for k in RECORDED}
        return dict(command="step", models=models, sizes=sizes, phases=self.phases, **rest)


def build_step_plan(args: argparse.Namespace) -> StepPlan:
    """The plan of ``perfsuite step``'s parsed arguments (argparse checked each number)."""
    device = resolve_device(args.device)
    # get_preset's and size_for's ValueErrors name their flags: bad input (cli.main)
    presets = [get_preset(name) for name in dict.fromkeys(parse_list(args.model, "model"))]
    sizes = {p.name: size_for(p, device, args.layers, args.seq, args.batch) for p in presets}
    plan = StepPlan(
        dtypes=parse_dtypes(args.dtype or ("bf16" if device == "cuda" else "fp32"), DTYPES),
        methods=resolve_methods(args.methods, "step", table_order=True),
        shapes=[],
        betas=parse_betas(args.beta),
        phases=list(STEP_PHASES),
        device=device,
        samples=args.samples,
        warmup=args.warmup,
        seed=args.seed,
        memory_limit=args.memory_limit,
        timeout_s=args.timeout,
        presets=presets,
        sizes=sizes,
    )
    plan.check()
    plan.capacity, plan.capacity_source = capacity_for(device, args.memory_limit)
    return plan
