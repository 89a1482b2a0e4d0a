"""The parity check catches a perturbed training run within a few steps.

A planted 1 % gradient scale on half of the tokens (what a kernel bug at a tile
boundary would do) must turn a method's verdict to ``differs``, while the same
method without the plant stays ``same``. A 1 % scale of the *whole* gradient is
the one perturbation no loss-curve check can see under AdamW, whose update
``m / sqrt(v)`` does not change when every gradient is scaled by the same
factor: the last test pins that limit down (the README states it).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from perfsuite.baselines.torch_methods import eager_loss
from perfsuite.converge.data import build_dataset
from perfsuite.converge.model import set_deterministic
from perfsuite.converge.parity import attach_verdicts
from perfsuite.converge.presets import PRESETS
from perfsuite.converge.train import train_run
from perfsuite.method import Capabilities, Case, LossFn, SimpleMethod
from perfsuite.plan.registry import get_method

PRESET = replace(PRESETS["smoke"], steps=5)
BETA = 0.1


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; backward multiplies the gradient of rows ``[:rows]`` by ``scale``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float, rows: int) -> torch.Tensor:  # type: ignore[override]
        ctx.scale, ctx.rows = scale, rows
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        grad = grad.clone()
        grad[: ctx.rows] *= ctx.scale
        return grad, None, None


def _planted(name: str, scale: float, share: float) -> SimpleMethod:
    """Eager's loss, with the gradient of the first ``share`` of the tokens scaled."""

    def build(case: Case, c: torch.Tensor) -> LossFn:
        def loss_fn(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            e = _ScaleGrad.apply(e, scale, int(e.shape[0] * share))
            return eager_loss(e, c, t, case.beta, case.softcap)

        return loss_fn

    return SimpleMethod(name, "planted gradient scale", build, Capabilities(label_smoothing=True))


def test_a_planted_gradient_scale_differs_and_a_uniform_one_is_invisible():
    set_deterministic(PRESET.seed)
    data = build_dataset(PRESET)
    methods = [
        get_method("eager"),
        _planted("unperturbed", 1.0, 0.5),  # the same wrapper, scale 1: must stay `same`
        _planted("half-tokens-1pct", 1.01, 0.5),
        _planted("all-tokens-1pct", 1.01, 1.0),
    ]
    runs = [train_run(m, PRESET, data, BETA, "fp32", "cpu") for m in methods]
    assert all(r.status == "ok" for r in runs), [(r.method, r.reason) for r in runs]
    attach_verdicts(runs)
    unperturbed, planted, uniform = (r.parity for r in runs[1:])
    assert unperturbed["verdict"] == "same", unperturbed
    assert unperturbed["loss_max_abs_diff"] == 0.0
    assert planted["verdict"] == "differs", planted
    # Step 0's loss is computed before any update: the first visible step is 1 or later.
    assert planted["loss_first_step_over_tol"] is not None
    assert 1 <= planted["loss_first_step_over_tol"] < PRESET.steps
    assert planted["loss_tolerance_used"] > 1.0
    assert uniform["verdict"] == "same", uniform
    assert uniform["loss_tolerance_used"] < 0.1
