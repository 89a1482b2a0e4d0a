"""Parity verdicts: does a method train the model the way eager does, in the same dtype?
Liger's convergence tolerances, or ``NOISE_FACTOR`` times eager's own noise, which 16-bit
rounding and long fp32 runs make outgrow a fixed tolerance (docs/converge.md)."""

from __future__ import annotations

import math
from typing import Any

import torch

from perfsuite.converge.presets import REFERENCE
from perfsuite.converge.train import RunResult

NOISE_FACTOR = 2.0


def yardstick_for(dtype: str) -> str:
    """The method whose distance from eager is eager's own noise in ``dtype``: in fp32 the
    tokens summed in two halves, in 16 bit fp32 logits on the same model."""
    return "eager-reordered" if dtype == "fp32" else "reference"


TOLERANCES: dict[str, dict[str, float]] = {
    "fp32": dict(loss_atol=1e-8, loss_rtol=2e-5, param_atol=5e-3, param_rtol=1e-5),
    "bf16": dict(loss_atol=1e-3, loss_rtol=1e-2, param_atol=1e-2, param_rtol=1e-2),
    "fp16": dict(loss_atol=1e-3, loss_rtol=1e-2, param_atol=1e-2, param_rtol=1e-2),
}


def tolerances_doc() -> dict[str, Any]:
    return {
        "source": "Liger-Kernel convergence tests (mini_llama3), elementwise "
        "|x - eager| <= atol + rtol |eager|",
        "noise rule": f"or max |x - eager| <= {NOISE_FACTOR:g} x max |yardstick - eager|, "
        "yardstick: eager-reordered (fp32: the loss summed in two halves) or reference "
        "(16-bit: fp32 logits, same model dtype)",
        **TOLERANCES,
    }


def _excess(x: torch.Tensor, ref: torch.Tensor, tol: dict[str, float], what: str) -> torch.Tensor:
    """``|x - ref| / (atol + rtol |ref|)`` elementwise, ``what``'s tolerances: <= 1 is within."""
    return (x - ref).abs() / (tol[f"{what}_atol"] + tol[f"{what}_rtol"] * ref.abs())


def _per_step(run: RunResult, key: str = "loss") -> torch.Tensor:
    return torch.tensor([s.get(key, math.nan) for s in run.steps], dtype=torch.float64)


def _rel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a - b).abs() / b.abs().clamp_min(1e-30)


def compare(run: RunResult, ref: RunResult | None, yard: RunResult | None = None) -> dict:
    """Distances of ``run`` from the eager run ``ref`` and the verdict they give."""
    if run.method == REFERENCE:
        return {"verdict": "reference"}
    if run.status != "ok":
        return {"verdict": "—"}
    if ref is None:
        return {"verdict": "no reference", "reason": f"{REFERENCE} was not run"}
    if ref.status != "ok" or ref.params is None or run.params is None:
        return {"verdict": "no reference", "reason": f"{REFERENCE} run: {ref.status}"}
    tol = TOLERANCES[run.dtype]
    losses, ref_losses = _per_step(run), _per_step(ref)
    diff, pdiff = (losses - ref_losses).abs(), (run.params - ref.params).abs()
    over = _excess(losses, ref_losses, tol, "loss")
    loss_excess = float(over.max())
    param_excess = float(_excess(run.params, ref.params, tol, "param").max())
    loss_ok, param_ok = loss_excess <= 1.0, param_excess <= 1.0
    extra: dict[str, Any] = {}
    if yard is not None and yard.status == "ok" and yard.params is not None:
        noise = {
            "loss_max_abs": float((_per_step(yard) - ref_losses).abs().max()),
            "param_max_abs": float((yard.params - ref.params).abs().max()),
        }
        extra = {"eager_noise": noise}
        loss_ok = loss_ok or float(diff.max()) <= NOISE_FACTOR * noise["loss_max_abs"]
        param_ok = param_ok or float(pdiff.max()) <= NOISE_FACTOR * noise["param_max_abs"]
    rel = _rel(losses, ref_losses)
    # Not judged: the gradient norms point at the backward when the losses drift apart.
    grad_rel = _rel(_per_step(run, "grad_norm"), _per_step(ref, "grad_norm"))
    first = over.gt(1.0).nonzero()
    # The yardstick's first step past the fixed tolerance is eager's own horizon.
    same = "same" if loss_ok and param_ok else "differs"
    return {
        "verdict": "yardstick" if yard is not None and run.method == yard.method else same,
        "loss_max_abs_diff": float(diff.max()),
        "loss_max_rel_diff": float(rel.max()),
        "loss_rel_diff_per_step": rel.tolist(),
        "grad_norm_max_rel_diff": None if grad_rel.isnan().any() else float(grad_rel.max()),
        "loss_final_abs_diff": float(diff[-1]),
        "loss_first_step_over_tol": int(first[0]) if first.numel() else None,
        "param_max_abs_diff": float(pdiff.max()),
        "param_rel_l2": float((run.params - ref.params).norm() / ref.params.norm()),
        "loss_tolerance_used": loss_excess,
        "param_tolerance_used": param_excess,
        "tolerance": dict(tol),
        **extra,
    }


def attach_verdicts(runs: list[RunResult]) -> None:
    """Set ``parity`` on every run against the eager run of the same beta and dtype."""
    refs = {(r.beta, r.dtype): r for r in runs if r.method == REFERENCE}
    yards = {(r.beta, r.dtype): r for r in runs if r.method == yardstick_for(r.dtype)}
    for run in runs:
        key = (run.beta, run.dtype)
        run.parity = compare(run, refs.get(key), yards.get(key))
