"""From what the user asked for to the list of cells to measure, validated up front."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from perfsuite.plan.memory_model import device_capacity, exceeds, gate_bytes, predicted_peak
from perfsuite.plan.registry import all_methods, methods_for
from perfsuite.plan.shapes import Shape
from perfsuite.results.kinds import DTYPES
from perfsuite.results.results import PHASES
from perfsuite.units import fmt_bytes

# Bounds that keep a typo from planning a run of days: 10,000 samples of the smoke
# shape's slowest interpreted cell already take hours on a 2-core CPU.
SAMPLES_MAX = 10_000
WARMUP_MAX = 1_000


class PlanError(ValueError):
    """Bad arguments, named precisely; the CLI prints it and exits non-zero."""


@dataclass
class Plan:
    methods: list[str]
    shapes: list[Shape]
    dtypes: list[str]
    betas: list[float]
    phases: list[str]
    device: str
    softcap: float | None = None
    samples: int = 20
    warmup: int = 3
    seed: int = 0
    memory_limit: int | None = None
    timeout_s: float = 3600.0
    # Workers at a time for Triton methods under the CPU interpreter (harness.schedule).
    jobs: int = 1
    notes: list[str] = field(default_factory=list)
    # perfsuite.plan.workloads spec; None is random inputs.
    workload: dict[str, Any] | None = None
    # --dtype: every shape in it; None runs each shape in its own default dtype.
    dtype: str | None = None
    # --tp: tensor-parallel sizes; each case runs across that many ranks with the TP
    # methods (perfsuite.tp_method). None: one device, the single-device methods.
    tps: list[int] | None = None
    # Seconds any one collective of a multi-rank cell may wait before the cell fails.
    collective_timeout_s: float = 300.0
    # How samples are timed (measure.timers.TIMERS): part of every cell's identity.
    timer: str = "events"
    # --profile: the folder a profiled call's trace goes to, per cell and phase.
    profile: str | None = None

    def dtypes_for(self, shape: Shape) -> list[str]:
        """The dtypes ``shape`` runs in (``dtypes`` is their union, for the record)."""
        return [self.dtype] if self.dtype else [shape.dtype]

    def cases(self) -> list[dict[str, Any]]:
        """Every (shape, dtype, beta) as worker-ready dicts (Case fields plus ``shape``)."""
        return [
            {
                "shape": shape.name,
                "tokens": shape.tokens,
                "vocab": shape.vocab,
                "hidden": shape.hidden,
                "dtype": dtype,
                "beta": beta,
                "softcap": self.softcap,
                "device": self.device,
                "timer": self.timer,
                **({"workload": self.workload} if self.workload else {}),
                **({"tp": tp} if tp is not None else {}),
            }
            # TP outermost: a worker starts K ranks once for all cases of one size.
            for tp in self.tps or [None]
            for shape in self.shapes
            for dtype in self.dtypes_for(shape)
            for beta in self.betas
        ]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)  # the shapes too

    def check(self) -> None:
        """The bounds of the shared options that argparse's types leave to the plan."""
        samples, warmup, limit = self.samples, self.warmup, self.memory_limit
        if not 1 <= samples <= SAMPLES_MAX:
            raise PlanError(f"--samples must be in [1, {SAMPLES_MAX:,}], got {samples:,}")
        if not 0 <= warmup <= WARMUP_MAX:
            raise PlanError(f"--warmup must be in [0, {WARMUP_MAX:,}], got {warmup:,}")
        if limit is not None and limit <= 0:
            raise PlanError(f"--memory-limit must be a size > 0 (e.g. 2G), got {limit}")


def parse_list(text: str, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise PlanError(f"--{what} is empty")
    return items


def _numbers(text: str, what: str, convert: type, lo: float, hi: float) -> list:
    """``--what a,b,c``: distinct values, each in [lo, hi]."""
    values = []
    for item in parse_list(text, what):
        try:
            value = convert(item)
        except ValueError:
            kind = "an integer" if convert is int else "a number"
            raise PlanError(f"--{what}: {item!r} is not {kind}") from None
        if not lo <= value <= hi:
            raise PlanError(f"--{what}: {value:g} is outside [{lo:g}, {hi:g}]")
        values.append(value)
    return list(dict.fromkeys(values))


def parse_betas(text: str) -> list[float]:
    return _numbers(text, "beta", float, 0.0, 1.0)


def parse_ints(text: str, what: str) -> list[int]:
    """``--what 1,2,3``: distinct positive integers, ascending."""
    return sorted(_numbers(text, what, int, 1, math.inf))


# Ranks one machine starts for a cell: beyond this a typo (--tp 1000) would fork a
# thousand processes; a CPU run of more ranks than cores only measures contention.
TP_MAX = 64


def parse_tps(text: str, device: str) -> list[int]:
    """``--tp 1,2,4``; on CUDA at most the GPUs here (NCCL runs one GPU per rank)."""
    import torch  # here: sweep's arguments are checked before torch loads

    sizes = sorted(_numbers(text, "tp", int, 1, TP_MAX))
    if resolve_device(device) == "cuda" and sizes[-1] > (gpus := torch.cuda.device_count()):
        raise PlanError(f"--tp {sizes[-1]}: NCCL runs one GPU per rank and this machine has {gpus}")
    return sizes


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise PlanError("--device cuda: no CUDA device here (torch sees none); use --device cpu")
    return device


def resolve_methods(text: str | None, kind: str = "loss", table_order: bool = False) -> list[str]:
    """The one method resolver, for the cell ``kind``: none given is the default set (the
    paper's table), ``all`` every method of the kind; ``table_order``: in the registry's
    order, else as given."""
    known: dict[str, Any] = methods_for(kind)
    if text is None:
        return [name for name, m in known.items() if m.timed_by_default]
    names = list(known) if text.strip() == "all" else parse_list(text, "methods")
    unknown = [n for n in names if n not in known]
    if unknown:
        what = "TP method(s)" if kind == "tp" else "method(s)"
        known_list = ", ".join(known)
        raise PlanError(f"--methods: unknown {what} {', '.join(unknown)}; known: {known_list}")
    return [n for n in known if n in names] if table_order else list(dict.fromkeys(names))


def parse_choices(text: str, what: str, known: tuple[str, ...]) -> list[str]:
    """``--what a,b``: distinct names, each one of ``known``."""
    names = list(dict.fromkeys(parse_list(text, what)))
    bad = [n for n in names if n not in known]
    if bad:
        raise PlanError(f"--{what}: unknown {', '.join(bad)}; choose from {', '.join(known)}")
    return names


def parse_dtypes(text: str, known: tuple[str, ...] = DTYPES) -> list[str]:
    return parse_choices(text, "dtype", known)


def check_fits(plan: Plan) -> None:
    """Refuse, before starting, a CPU run whose every cell would only be ``oom``: a
    ``--memory-limit`` below the smallest cell's predicted peak (one device only), or a
    shape whose correctness gate alone cannot fit the RAM."""
    if plan.device != "cpu":
        return
    known, softcap = all_methods(), plan.softcap is not None
    if plan.memory_limit is not None and not plan.tps:
        need, what, method, shape = min(
            [
                (*predicted_peak(known[m].caps, s.tokens, s.vocab, s.hidden, d, softcap), m, s.name)
                for m in plan.methods
                for s in plan.shapes
                for d in plan.dtypes_for(s)
            ],
            key=lambda cell: cell[0],  # the first of equal peaks
        )
        if plan.memory_limit < need:
            raise PlanError(
                f"--memory-limit {fmt_bytes(plan.memory_limit)} is below the smallest cell's "
                f"predicted peak, ~{fmt_bytes(need)} ({what}; {method} on {shape}): every "
                "cell would be oom; raise the limit or leave it out"
            )
    capacity = device_capacity("cpu")  # not --memory-limit: over it a worker is ``oom``
    if capacity is None:
        return
    gate = "the correctness gate: fp32 reference and eager N x V logits"
    for shape in plan.shapes:
        for dtype in plan.dtypes_for(shape):
            need = gate_bytes(shape.tokens, shape.vocab, shape.hidden, dtype, softcap)
            if need > capacity:
                raise PlanError(
                    f"shape {shape.name} (N={shape.tokens}, V={shape.vocab}, D={shape.hidden}, "
                    f"{dtype}) does not fit: {exceeds(need, gate, capacity, 'cpu')}. Run it on "
                    f"a GPU (--device cuda), or run --shape smoke, or shrink it, e.g. "
                    f"--shape {shape.name.rstrip('*')} --tokens 256"
                )


def default_jobs() -> int:
    """Two interpreter workers where there are two cores (the interpreter is one thread)."""
    return max(1, min(2, len(os.sched_getaffinity(0))))


def build_plan(
    *,
    shapes: list[Shape],
    methods: str | None = None,
    betas: str = "0,0.1",
    phases: str = ",".join(PHASES),
    device: str = "auto",
    jobs: int | None = None,
    tps: str | None = None,
    check_memory: bool = True,
    **fields: Any,
) -> Plan:
    """The plan of what was asked, every option checked; ``fields`` are ``Plan``'s own
    (samples, seed, timer, ...), kept as given once checked."""
    phase_list = parse_choices(phases, "phases", PHASES)
    dtypes = parse_dtypes(fields.get("dtype") or ",".join(s.dtype for s in shapes))
    tp_sizes = parse_tps(tps, device) if tps is not None else None
    plan = Plan(
        methods=resolve_methods(methods, "loss" if tp_sizes is None else "tp"),
        shapes=shapes,
        dtypes=dtypes,
        betas=parse_betas(betas),
        phases=[p for p in PHASES if p in phase_list],
        device=resolve_device(device),
        jobs=default_jobs() if jobs is None else jobs,
        tps=tp_sizes,
        **fields,
    )
    plan.check()
    if plan.workload is not None and plan.workload.get("kind") == "synthetic":
        from perfsuite.plan.workloads import WorkloadError, check_synthetic  # imports torch

        for shape in shapes:
            try:
                check_synthetic(plan.workload["entropy"], shape.vocab, shape.hidden)
            except WorkloadError as err:
                raise PlanError(f"{shape.name}: {err}") from None
    if tp_sizes is not None and (plan.timer != "events" or plan.profile is not None):
        raise PlanError("--timer and --profile measure one device: drop them with --tp")
    if plan.profile is not None:
        from perfsuite.results.outpath import check_output_dir

        check_output_dir(plan.profile, "--profile")  # before anything is measured
    if check_memory:  # a sweep predicts fit per cell instead (perfsuite.run.sweep)
        check_fits(plan)
    return plan
