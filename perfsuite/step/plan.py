"""From ``perfsuite step``'s arguments to the cases to measure, validated before anything
runs: every bad value is a ``PlanError`` naming its flag (one line, exit 2)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from perfsuite.args import non_negative_int, parse_size, positive_float, positive_int, seed_int
from perfsuite.plan.memory_model import CPU_MEMORY_SHARE, CUDA_MEMORY_SHARE, device_capacity
from perfsuite.plan.plan import SAMPLES_MAX, WARMUP_MAX, PlanError, parse_betas, resolve_device
from perfsuite.results.results import STEP_PHASES
from perfsuite.step import methods as step_methods
from perfsuite.step.cases import make_case
from perfsuite.step.methods import DTYPES
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
        return {
            "command": "step",
            "models": [p.name for p in self.presets],
            "sizes": {name: vars(size) for name, size in self.sizes.items()},
            "methods": self.methods,
            "dtypes": self.dtypes,
            "betas": self.betas,
            "phases": list(STEP_PHASES),
            "device": self.device,
            "samples": self.samples,
            "warmup": self.warmup,
            "seed": self.seed,
            "memory_limit": self.memory_limit,
            "timeout_s": self.timeout_s,
            "capacity": self.capacity,
            "capacity_source": self.capacity_source,
        }


def _value(text: str | None, flag: str, parse: Any) -> Any:
    """``parse(text)`` with argparse's helpers, their complaint as a ``PlanError``."""
    if text is None:
        return None
    try:
        return parse(text)
    except (argparse.ArgumentTypeError, ValueError) as err:
        raise PlanError(f"{flag}: {err}") from None


def _names(text: str, flag: str) -> list[str]:
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise PlanError(f"{flag} {text!r}: nothing named")
    return names


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
    """The plan of ``perfsuite step``'s parsed arguments (numbers still as typed)."""
    device = resolve_device(args.device)
    presets = []
    for name in _names(args.model, "--model"):
        try:
            presets.append(get_preset(name))
        except ValueError as err:
            raise PlanError(f"--model: {err}") from None
    layers = _value(args.layers, "--layers", positive_int)
    seq = _value(args.seq, "--seq", positive_int)
    batch = _value(args.batch, "--batch", positive_int)
    sizes = {}
    for preset in presets:
        try:
            sizes[preset.name] = size_for(preset, device, layers, seq, batch)
        except ValueError as err:
            raise PlanError(str(err)) from None
    try:
        methods = step_methods.resolve(args.methods)
    except ValueError as err:
        raise PlanError(f"--methods: {err}") from None
    dtypes = _names(args.dtype or ("bf16" if device == "cuda" else "fp32"), "--dtype")
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise PlanError(f"--dtype: unknown {', '.join(bad)}; choose from {', '.join(DTYPES)}")
    samples = _value(args.samples, "--samples", positive_int)
    warmup = _value(args.warmup, "--warmup", non_negative_int)
    if samples > SAMPLES_MAX:
        raise PlanError(f"--samples must be at most {SAMPLES_MAX:,}, got {samples:,}")
    if warmup > WARMUP_MAX:
        raise PlanError(f"--warmup must be at most {WARMUP_MAX:,}, got {warmup:,}")
    timeout = _value(args.timeout, "--timeout", positive_float)
    memory_limit = _value(args.memory_limit, "--memory-limit", parse_size)
    if memory_limit is not None and memory_limit <= 0:
        raise PlanError(f"--memory-limit must be a size > 0 (e.g. 8G), got {args.memory_limit}")
    if not math.isfinite(timeout):
        raise PlanError(f"--timeout must be finite, got {args.timeout}")
    capacity, source = capacity_for(device, memory_limit)
    return StepPlan(
        presets=presets,
        sizes=sizes,
        methods=methods,
        dtypes=dtypes,
        betas=parse_betas(args.beta),
        device=device,
        samples=samples,
        warmup=warmup,
        seed=_value(args.seed, "--seed", seed_int),
        memory_limit=memory_limit,
        timeout_s=timeout,
        capacity=capacity,
        capacity_source=source,
    )
