"""From what the user asked for to the list of cells to measure, validated up front."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from perfsuite.method import DTYPES
from perfsuite.plan.memory_model import CPU_MEMORY_SHARE, available_memory, reference_bytes
from perfsuite.plan.registry import all_methods
from perfsuite.plan.shapes import Shape
from perfsuite.results.results import PHASES


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
    # Workers at a time for Triton methods under the CPU interpreter (runner.schedule).
    jobs: int = 1
    notes: list[str] = field(default_factory=list)
    # perfsuite.plan.workloads spec; None is random inputs.
    workload: dict[str, Any] | None = None

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
                **({"workload": self.workload} if self.workload else {}),
            }
            for shape in self.shapes
            for dtype in self.dtypes
            for beta in self.betas
        ]

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["shapes"] = [asdict(s) for s in self.shapes]
        return data


def parse_list(text: str, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise PlanError(f"--{what} is empty")
    return items


def parse_betas(text: str) -> list[float]:
    betas = []
    for item in parse_list(text, "beta"):
        try:
            beta = float(item)
        except ValueError:
            raise PlanError(f"--beta: {item!r} is not a number") from None
        if not 0.0 <= beta <= 1.0:
            raise PlanError(f"--beta: {beta:g} is outside [0, 1]")
        betas.append(beta)
    return list(dict.fromkeys(betas))


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise PlanError("--device cuda: no CUDA device here (torch sees none); use --device cpu")
    if device not in ("cpu", "cuda"):
        raise PlanError(f"--device must be auto, cuda or cpu, not {device!r}")
    return device


def resolve_methods(text: str | None) -> list[str]:
    known = all_methods()
    if text is None:
        return [name for name, m in known.items() if m.timed_by_default]
    names = parse_list(text, "methods")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise PlanError(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return list(dict.fromkeys(names))


def check_fits(plan: Plan) -> None:
    """Refuse CPU shapes whose fp32 reference logits cannot fit, before starting."""
    if plan.device != "cpu":
        return
    available = available_memory()
    if available is None:
        return
    budget = CPU_MEMORY_SHARE * available
    for shape in plan.shapes:
        need = max(reference_bytes(shape.tokens, shape.vocab, shape.hidden, d) for d in plan.dtypes)
        if need > budget:
            raise PlanError(
                f"shape {shape.name} (N={shape.tokens}, V={shape.vocab}, D={shape.hidden}) needs "
                f"~{need / 2**30:.1f} GiB on CPU for the N x V logits of the fp32 reference and "
                f"eager, but this machine has {available / 2**30:.1f} GiB available. Run it on a "
                f"GPU (--device cuda), or run --shape smoke, or shrink it, e.g. "
                f"--shape {shape.name.rstrip('*')} --tokens 256"
            )


def default_jobs() -> int:
    """Two interpreter workers where there are two cores: the interpreter is one Python
    thread, so a second worker roughly halves a CPU run of the Triton methods."""
    return max(1, min(2, len(os.sched_getaffinity(0))))


def build_plan(
    *,
    shapes: list[Shape],
    methods: str | None = None,
    betas: str = "0,0.1",
    phases: str = ",".join(PHASES),
    dtype: str | None = None,
    device: str = "auto",
    softcap: float | None = None,
    samples: int = 20,
    warmup: int = 3,
    seed: int = 0,
    memory_limit: int | None = None,
    timeout_s: float = 3600.0,
    jobs: int | None = None,
    workload: dict[str, Any] | None = None,
    check_memory: bool = True,
) -> Plan:
    phase_list = parse_list(phases, "phases")
    bad = [p for p in phase_list if p not in PHASES]
    if bad:
        raise PlanError(f"--phases: unknown {', '.join(bad)}; choose from {', '.join(PHASES)}")
    dtypes = [dtype] if dtype else list(dict.fromkeys(s.dtype for s in shapes))
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise PlanError(f"--dtype: unknown {', '.join(bad)}; choose from {', '.join(DTYPES)}")
    if samples < 1:
        raise PlanError(f"--samples must be >= 1, got {samples}")
    if softcap is not None and softcap <= 0:
        raise PlanError(f"--softcap must be positive, got {softcap:g}")
    if jobs is not None and jobs < 1:
        raise PlanError(f"--jobs must be >= 1, got {jobs}")
    plan = Plan(
        methods=resolve_methods(methods),
        shapes=shapes,
        dtypes=dtypes,
        betas=parse_betas(betas),
        phases=[p for p in PHASES if p in phase_list],
        device=resolve_device(device),
        softcap=softcap,
        samples=samples,
        warmup=warmup,
        seed=seed,
        memory_limit=memory_limit,
        timeout_s=timeout_s,
        jobs=default_jobs() if jobs is None else jobs,
        workload=workload,
    )
    if check_memory:  # a sweep predicts fit per cell instead (perfsuite.run.sweep)
        check_fits(plan)
    return plan
