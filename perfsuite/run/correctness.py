"""The correctness gate: a method's loss and gradients against the fp32 reference, within
twice torch's own error in the same dtype plus a small slack (Cut Cross-Entropy's rule)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from perfsuite.baselines.torch_methods import case_loss, eager_loss, reference_loss
from perfsuite.method import Case, LossFn
from perfsuite.run.inputs import Inputs, make_inputs

# Relative slack (times the reference's largest magnitude) per dtype.
SLACK = {"fp32": 1e-5, "bf16": 1e-3, "fp16": 1e-4}
QUANTITIES = ("loss", "grad_e", "grad_c")


@dataclass
class Outcome:
    """Loss and gradients of one fwd+bwd, as fp32 on the case's device."""

    loss: torch.Tensor
    grad_e: torch.Tensor
    grad_c: torch.Tensor

    def get(self, name: str) -> torch.Tensor:
        return getattr(self, name)


@dataclass
class Verdict:
    passed: bool
    errors: dict[str, float]
    bounds: dict[str, float]
    problems: list[str] = field(default_factory=list)  # what failed, in words

    def explain(self) -> str:
        return "; ".join(self.problems)

    def fields(self, **extra: Any) -> dict[str, Any]:
        """The gate's columns of a row, with ``extra`` ones."""
        errors = {f"{q}_err": self.errors[q] for q in QUANTITIES}
        return dict(max_abs_err=max(self.errors.values()), tolerance=self.bounds, **errors, **extra)


def run_once(loss_fn: LossFn, inputs: Inputs) -> Outcome:
    """One forward and backward; returns fp32 copies of loss and gradients."""
    inputs.clear_grads()
    loss = loss_fn(inputs.e, inputs.c, inputs.targets)
    if loss.dim() != 0:
        raise ValueError(f"loss must be a scalar, got shape {tuple(loss.shape)}")
    loss.backward()
    if inputs.e.grad is None or inputs.c.grad is None:
        raise ValueError("the method produced no gradient for e or c")
    out = Outcome(loss.detach().float(), inputs.e.grad.float(), inputs.c.grad.float())
    del loss
    inputs.clear_grads()
    return out


def bit_identical(a: Outcome, b: Outcome) -> bool:
    """Same bits in loss, dE and dC (NaN included: compared as integers)."""
    return all(
        torch.equal(a.get(q).view(torch.int32), b.get(q).view(torch.int32)) for q in QUANTITIES
    )


def reference_outcome(case: Case, inputs: Inputs) -> Outcome:
    return run_once(functools.partial(case_loss, reference_loss, case), inputs)


def gate_reference(
    case: Case, seed: int, workload: dict[str, Any] | None
) -> tuple[Inputs, Outcome, dict[str, float]]:
    """A case's inputs, their fp32 reference (refused when not finite), its tolerances."""
    inputs = make_inputs(case, seed, workload)
    reference = reference_outcome(case, inputs)
    check_reference(reference, inputs, case.ignore_index)
    return inputs, reference, tolerances(case.dtype, reference, torch_error_outcome(case, inputs))


class UnusableInputs(ValueError):
    """The fp32 reference is not finite: no method can be judged on these inputs."""


def check_reference(reference: Outcome, inputs: Inputs, ignore_index: int = -100) -> None:
    """Refuse inputs on which the reference itself is not finite (every target ignored;
    NaN or inf in e or c): else "loss error nan > tolerance nan" for every method."""
    bad = [q for q in QUANTITIES if not bool(torch.isfinite(reference.get(q)).all())]
    if not bad:
        return
    why = []
    if not bool((inputs.targets != ignore_index).any()):
        why.append(f"every target is ignore_index={ignore_index}")
    for name in ("e", "c"):
        t = getattr(inputs, name)
        if not bool(torch.isfinite(t).all()):
            why.append(f"{name} holds {int((~torch.isfinite(t)).sum())} NaN/inf values")
    raise UnusableInputs(
        f"the fp32 reference's {', '.join(bad)} is not finite"
        + (f" ({'; '.join(why)})" if why else "")
        + ": no method can be judged on these inputs"
    )


def torch_error_outcome(case: Case, inputs: Inputs) -> Outcome:
    """What torch computes one precision step away: eager in the case's dtype for
    bf16/fp16, the reference computed in fp64 for fp32."""
    if case.dtype != "fp32":
        return run_once(functools.partial(case_loss, eager_loss, case), inputs)

    def fp64(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return case_loss(eager_loss, case, e.double(), c.double(), t)  # weights in fp64 too

    return run_once(fp64, inputs)


def distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference, in the wider dtype; NaN anywhere is NaN."""
    return float(torch.sub(a, b).abs_().max()) if a.numel() else 0.0


def tolerance(torch_err: float, ref: torch.Tensor, dtype: str) -> float:
    """The bound of one quantity: ``2·torch_err + slack·max|ref|``."""
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    return 2.0 * torch_err + SLACK[dtype] * max(scale, 1e-6)


Named = Mapping[str, torch.Tensor]


def _named(x: Outcome | Named) -> Named:
    return x if isinstance(x, Mapping) else {q: x.get(q) for q in QUANTITIES}


def tolerances(dtype: str, reference: Outcome | Named, torch_version: Outcome | Named) -> dict:
    """Each quantity's bound (``tolerance``), from torch's own error on it."""
    ref, torch_v = _named(reference), _named(torch_version)
    return {q: tolerance(distance(torch_v[q], r), r, dtype) for q, r in ref.items()}


def judge(result: Outcome | Named, reference: Outcome | Named, bounds: dict[str, float]) -> Verdict:
    """The one correctness judge (an ``Outcome``'s or any named tensors): every quantity
    of ``reference`` within its bound passes; NaN or a quantity ``result`` lacks fails."""
    got, want = _named(result), _named(reference)
    errors = {q: distance(got[q], ref) if q in got else float("nan") for q, ref in want.items()}
    problems = [f"no gradient for {q}" for q in want if q not in got]
    problems += [
        f"{q} error {errors[q]:.3g} > tolerance {bounds[q]:.3g}"
        for q in want
        if q in got and not errors[q] <= bounds[q]
    ]
    return Verdict(not problems, errors, bounds, problems)
