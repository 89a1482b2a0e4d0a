"""Liger Kernel's fused linear cross-entropy; on CPU under ``TRITON_INTERPRET=1``, but not
its softcap path. Across ranks its vocab-parallel CE: liger-kernel 0.8.5 skips its
all-reduces for ``tp_group=None``, so the group is always passed."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch

from perfsuite import method as _method
from perfsuite.baselines.torch_methods import softcapped
from perfsuite.method import AcrossRanks, Case, Holds, LossFn, SimpleMethod, StepPatch, Unavailable
from perfsuite.tp_method import SumGradOver, equal_shards_only

SOFTCAP_CPU_REASON = (
    "softcap under the Triton interpreter: Liger's softcap path calls libdevice.tanh and "
    "float.to(), which triton's interpreter does not run"
)
INTERPRET_REASON = (
    "on CPU Liger's Triton kernels need TRITON_INTERPRET=1 (set before liger_kernel is "
    "imported); triton has no CPU driver"
)
UNEVEN_REASON = (
    "Liger's vocab-parallel CE places rank r's shard at r x its own size (vocab_start = "
    "rank * v_local) and smooths over v_local x TP: uneven shards ({sizes}) are misread"
)


def require_interpreted(kernel: str = "cross_entropy.liger_cross_entropy_kernel") -> None:
    """On CPU, liger's ``kernel`` (under ``liger_kernel.ops``) must be interpreted: checked in
    ``build``, as the runner sets TRITON_INTERPRET for the worker only (read at import)."""
    from triton.runtime.interpreter import InterpretedFunction

    module, name = kernel.rsplit(".", 1)
    if not isinstance(_method.imported(f"liger_kernel.ops.{module}", name), InterpretedFunction):
        raise Unavailable(INTERPRET_REASON + " (liger_kernel was imported without it)")


def _build(case: Case, c: torch.Tensor, **options: Any) -> LossFn:
    loss_cls = _method.imported(
        "liger_kernel.transformers.fused_linear_cross_entropy",
        "LigerFusedLinearCrossEntropyLoss",
    )
    params = inspect.signature(loss_cls.__init__).parameters
    kwargs = dict(ignore_index=case.ignore_index, label_smoothing=case.beta, **options)
    if case.softcap is not None:
        kwargs["softcap"] = case.softcap
    if absent := [p for p in kwargs if p not in params]:
        raise Unavailable(
            f"this liger-kernel's LigerFusedLinearCrossEntropyLoss has no {', '.join(absent)}"
        )
    if c.device.type == "cpu":
        require_interpreted()
    module = loss_cls(reduction="mean", **kwargs)
    return lambda e, c, targets: module(c, e, targets)  # Liger's: (lin_weight, _input, target)


def _patch(model: torch.nn.Module, preset: Any, beta: float):
    monkey_patch = _method.imported("liger_kernel.transformers.monkey_patch")
    apply = getattr(monkey_patch, f"apply_liger_kernel_to_{preset.family}", None)
    if apply is None:
        raise Unavailable(f"this liger-kernel has no apply_liger_kernel_to_{preset.family}")
    if next(model.parameters()).device.type == "cpu":
        require_interpreted()
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


def _build_tp(case: Case, c_shard: torch.Tensor, shard: Any) -> LossFn:
    import torch.distributed as dist

    vp_loss = _method.imported(
        "liger_kernel.transformers.vocab_parallel_cross_entropy",
        "LigerVocabParallelCrossEntropy",
        "liger_kernel has no usable vocab-parallel CE",  # too old, or broken
    )
    if c_shard.device.type == "cpu":
        require_interpreted("vocab_parallel_cross_entropy.liger_vocab_parallel_ce_forward_kernel")
    module = vp_loss(ignore_index=case.ignore_index, label_smoothing=case.beta)
    group = dist.group.WORLD if shard.group is None else shard.group

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = softcapped(SumGradOver.apply(e, shard.group) @ c.T, case.softcap)
        losses = module(logits.unsqueeze(1), targets.unsqueeze(1), group)
        return losses.sum() / (targets != case.ignore_index).sum()

    return loss_fn


PIP = ("liger-kernel==0.8.5",)
CAPS = _method.Capabilities(
    label_smoothing=True,
    softcap=True,
    grads_in_forward=True,
    triton=True,
    holds=Holds("fused"),
    # One Triton program per token row: ~5x ours per call under the interpreter.
    interpreter_cost=5.0,
    softcap_off_cpu=SOFTCAP_CPU_REASON,
)

_COMMON: dict[str, Any] = dict(
    caps=CAPS, requires=("liger_kernel",), distributions=("liger-kernel",), pip=PIP
)

METHODS = [
    SimpleMethod(
        name="liger",
        description="Liger LigerFusedLinearCrossEntropyLoss (token-chunked logits, Triton CE "
        "kernel, grads computed in forward; dW accumulated in the input dtype)",
        build=_build,
        paper="liger",
        tp=AcrossRanks(
            _build_tp,
            "Liger LigerVocabParallelCrossEntropy on the shard logits (Triton kernels, fp32 exp "
            "buffer, PyTorch smoothing over the global vocabulary)",
            # The shard logits are torch's (softcap too), the backward a separate call.
            caps=dict(grads_in_forward=False, holds=Holds(), softcap_off_cpu=None),
            limits={
                "z_loss": "LigerVocabParallelCrossEntropy has no z-loss (lse_square_scale is "
                "its single-device CE's only)",
                "class_weights": "its vocab-parallel CE takes no class weights",
            },
            shard_check=equal_shards_only(UNEVEN_REASON),
        ),
        step=StepPatch(_patch),
        **_COMMON,
    ),
    SimpleMethod(
        name="liger-fp32acc",
        timed_by_default=False,  # an ablation of its accumulation dtype, by name
        description="liger with accum_dtype=torch.float32 (dW accumulated in fp32, cast back)",
        build=functools.partial(_build, accum_dtype=torch.float32),
        **_COMMON,
    ),
]
