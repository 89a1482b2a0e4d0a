"""Liger Kernel's fused linear cross-entropy (chunked logits, gradients in the forward).

``LigerFusedLinearCrossEntropyLoss(weight, input, target)`` materialises the logits one
token chunk at a time and folds their gradient into ``grad_e``/``grad_c`` before
returning. On CPU its Triton kernels run under ``TRITON_INTERPRET=1``, but not its softcap
path (liger-kernel 0.8.5, triton 3.7.1): ``caps.softcap_off_cpu`` says so before any worker.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from perfsuite.baselines.tp_liger import TP_LIGER, require_interpreted
from perfsuite.method import Capabilities, Case, LossFn, SimpleMethod, StepPatch, Unavailable

SOFTCAP_CPU_REASON = (
    "softcap under the Triton interpreter: Liger's softcap path calls libdevice.tanh and "
    "float.to(), which triton's interpreter does not run"
)


def _import_loss() -> type:
    try:
        from liger_kernel.transformers.fused_linear_cross_entropy import (
            LigerFusedLinearCrossEntropyLoss,
        )
    except ImportError as err:  # installed but broken (e.g. an incompatible triton)
        raise Unavailable(f"liger_kernel failed to import: {err}") from err
    return LigerFusedLinearCrossEntropyLoss


def _check_interpreted() -> None:
    from liger_kernel.ops.cross_entropy import liger_cross_entropy_kernel

    require_interpreted(liger_cross_entropy_kernel)


def _make_build(accum_fp32: bool):
    def build(case: Case, c: torch.Tensor) -> LossFn:
        loss_cls = _import_loss()
        params = inspect.signature(loss_cls.__init__).parameters
        kwargs: dict = dict(ignore_index=case.ignore_index, label_smoothing=case.beta)
        if case.softcap is not None:
            kwargs["softcap"] = case.softcap
        if accum_fp32:
            kwargs["accum_dtype"] = torch.float32
        absent = [p for p in kwargs if p not in params]
        if absent:
            raise Unavailable(
                f"this liger-kernel's LigerFusedLinearCrossEntropyLoss has no {', '.join(absent)}"
            )
        if c.device.type == "cpu":
            _check_interpreted()
        kwargs["reduction"] = "mean"
        module = loss_cls(**kwargs)

        def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            # Liger's order: (lin_weight, _input, target).
            return module(c, e, targets)

        return loss_fn

    return build


def _patch(model: torch.nn.Module, preset: Any, beta: float):
    try:
        from liger_kernel.transformers import monkey_patch
    except ImportError as err:
        raise Unavailable(f"liger_kernel failed to import: {err}") from err
    apply = getattr(monkey_patch, f"apply_liger_kernel_to_{preset.family}", None)
    if apply is None:
        raise Unavailable(f"this liger-kernel has no apply_liger_kernel_to_{preset.family}")
    if next(model.parameters()).device.type == "cpu":
        _check_interpreted()
    # Only the fused linear cross-entropy: its RMSNorm, RoPE and MLP kernels would make
    # the step differ in more than the loss (and patch the module globally).
    switches = {
        name: name == "fused_linear_cross_entropy"
        for name, p in inspect.signature(apply).parameters.items()
        if isinstance(p.default, bool)
    }
    apply(model=model, **switches)
    extra = {"label_smoothing": beta} if beta else {}
    return lambda ids: model(input_ids=ids, labels=ids, **extra).loss


CAPS = Capabilities(
    label_smoothing=True,
    softcap=True,
    grads_in_forward=True,
    triton=True,
    materializes_logits=False,
    # One Triton program per token row: ~5x ours per call under the interpreter.
    interpreter_cost=5.0,
    softcap_off_cpu=SOFTCAP_CPU_REASON,
)

METHODS = [
    SimpleMethod(
        name="liger",
        description="Liger LigerFusedLinearCrossEntropyLoss (token-chunked logits, Triton CE "
        "kernel, grads computed in forward; dW accumulated in the input dtype)",
        build=_make_build(accum_fp32=False),
        caps=CAPS,
        requires=("liger_kernel",),
        distributions=("liger-kernel", "triton"),
        tp=TP_LIGER,
        step=StepPatch(_patch, holds="fused"),
    ),
    SimpleMethod(
        name="liger-fp32acc",
        timed_by_default=False,  # an ablation of its accumulation dtype, by name
        description="liger with accum_dtype=torch.float32 (dW accumulated in fp32, cast back)",
        build=_make_build(accum_fp32=True),
        caps=CAPS,
        requires=("liger_kernel",),
        distributions=("liger-kernel", "triton"),
    ),
]
