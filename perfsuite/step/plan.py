"""From ``perfsuite step``'s arguments to the cases to measure, validated before anything
runs: every bad value is a ``PlanError`` naming its flag (one line, exit 2)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from perfsuite.plan.memory_model import CPU_MEMORY_SHARE, CUDA_MEMORY_SHARE, device_capacity
from perfsuite.plan.plan import (
    PlanError,
    check_measurement,
    parse_betas,
    parse_list,
    resolve_device,
)
from perfsuite.results.results import STEP_PHASES
from perfsuite.step.cases import make_case
from perfsuite.step.methods import DTYPES, resolve
from perfsuite.step.presets import Size, StepPreset, get_preset, size_for


@dataclass
class StepPlan:
    presets: list[StepPreset]
    sizes: dict[str, Size]
    methods: list[str]
    dtypes: list[str]
    betas: list[float]
    device: str
    samples: int = 10
    warmup: int = 2
    seed: int = 0
    memory_limit: int | None = None
    timeout_s: float = 3600.0
    # Bytes a worker may plan on, and what bounds it (for the oom rows' reasons).
    capacity: int | None = None
    capacity_source: str = ""

    def cases(self) -> list[dict[str, Any]]:
        """Every (model, dtype, β) in table order."""
        return [
            make_case(p, self.sizes[p.name], dtype, beta, self.device)
            for p in self.presets
            for dtype in self.dtypes
            for beta in self.betas
        ]

    def as_dict(self) -> dict[str, Any]:
        """``env.plan`` of the results (``phases``, ``samples``, ``warmup``, ``seed``: what
        ``merge`` and ``compare`` check agree)."""
        rest = {k: v for k, v in vars(self).items() if k not in ("presets", "sizes")}
        models = [p.name for p in self.presets]
        sizes = {name: vars(size) for name, size in self.sizes.items()}
        return dict(command="step", models=models, sizes=sizes, phases=list(STEP_PHASES), **rest)


def capacity_for(device: str, memory_limit: int | None) -> tuple[int | None, str]:
    """What a worker may take and why: ``--memory-limit`` when it is the smaller bound,
    else a share of the RAM available now (CPU) or of the GPU's memory."""
    capacity = device_capacity(device)
    if memory_limit is not None and (capacity is None or memory_limit <= capacity):
        return memory_limit, "--memory-limit"
    if device == "cpu":
        return capacity, f"{CPU_MEMORY_SHARE:.0%} of the RAM available now"
    return capacity, f"{CUDA_MEMORY_SHARE:.0%} of the GPU's memory"


def build_step_plan(args: argparse.Namespace) -> StepPlan:
    """The plan of ``perfsuite step``'s parsed arguments (argparse checked each number)."""
    device = resolve_device(args.device)
    names = dict.fromkeys(parse_list(args.model, "model"))
    try:
        presets = [get_preset(name) for name in names]
    except ValueError as err:
        raise PlanError(f"--model: {err}") from None
    # size_for's ValueError names its flag: bad input as it stands (cli.main)
    sizes = {p.name: size_for(p, device, args.layers, args.seq, args.batch) for p in presets}
    default_dtype = "bf16" if device == "cuda" else "fp32"
    dtypes = list(dict.fromkeys(parse_list(args.dtype or default_dtype, "dtype")))
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise PlanError(f"--dtype: unknown {', '.join(bad)}; choose from {', '.join(DTYPES)}")
    check_measurement(args.samples, args.warmup, args.memory_limit)
    capacity, source = capacity_for(device, args.memory_limit)
    return StepPlan(
        presets=presets,
        sizes=sizes,
        methods=resolve(args.methods),
        dtypes=dtypes,
        betas=parse_betas(args.beta),
        device=device,
        samples=args.samples,
        warmup=args.warmup,
        seed=args.seed,
        memory_limit=args.memory_limit,
        timeout_s=args.timeout,
        capacity=capacity,
        capacity_source=source,
    )
