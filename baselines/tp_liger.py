"""Liger Kernel's vocab-parallel cross-entropy on the shard logits.

``LigerVocabParallelCrossEntropy(label_smoothing=beta)`` (global smoothing: one more
all-reduce) on ``e @ c_shard.T`` shaped (N, 1, V/K), softcapped first; the mean over
kept rows is ours. Checked with liger-kernel 0.8.5: its all-reduces are skipped for
``tp_group=None``, so the group is always passed.
"""

from __future__ import annotations

from typing import Any

import torch

from perfsuite.baselines.torch_methods import softcapped
from perfsuite.baselines.tp_torch import TPMethod, sum_grad_over
from perfsuite.method import Capabilities, Case, LossFn, Unavailable
from perfsuite.tp_method import Shard, equal_shards_only

INTERPRET_REASON = (
    "on CPU Liger's Triton kernels need TRITON_INTERPRET=1 (set before liger_kernel is "
    "imported); triton has no CPU driver"
)
UNEVEN_REASON = (
    "Liger's vocab-parallel CE places rank r's shard at r x its own size (vocab_start = "
    "rank * v_local) and smooths over v_local x TP: uneven shards ({sizes}) are misread"
)


def require_interpreted(kernel: Any) -> None:
    """On CPU, liger's ``kernel`` must be an interpreter wrapper: ``@triton.jit`` reads
    TRITON_INTERPRET at liger's import. Checked in ``build``, not ``availability``: the
    runner sets it for the worker process only."""
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(kernel, InterpretedFunction):
        raise Unavailable(INTERPRET_REASON + " (liger_kernel was imported without it)")


def _build(case: Case, c_shard: torch.Tensor, shard: Shard) -> LossFn:
    import torch.distributed as dist

    try:
        from liger_kernel.ops.vocab_parallel_cross_entropy import (
            liger_vocab_parallel_ce_forward_kernel as kernel,
        )
        from liger_kernel.transformers.vocab_parallel_cross_entropy import (
            LigerVocabParallelCrossEntropy,
        )
    except ImportError as err:  # too old (no vocab-parallel CE) or broken
        raise Unavailable(f"liger_kernel has no usable vocab-parallel CE: {err}") from err
    if c_shard.device.type == "cpu":
        require_interpreted(kernel)
    module = LigerVocabParallelCrossEntropy(
        ignore_index=case.ignore_index, label_smoothing=case.beta
    )
    group = dist.group.WORLD if shard.group is None else shard.group

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = softcapped(sum_grad_over(e, shard.group) @ c.T, case.softcap)
        losses = module(logits.unsqueeze(1), targets.unsqueeze(1), group)
        return losses.sum() / (targets != case.ignore_index).sum()

    return loss_fn


TP_LIGER = TPMethod(
    name="liger",
    description="Liger LigerVocabParallelCrossEntropy on the shard logits (Triton "
    "kernels, fp32 exp buffer, PyTorch smoothing over the global vocabulary)",
    caps=Capabilities(
        label_smoothing=True,
        softcap=True,
        triton=True,
        # One Triton program per token row, as its single-device CE kernel.
        interpreter_cost=5.0,
    ),
    requires=("liger_kernel", "triton"),
    distributions=("liger-kernel", "triton", "torch"),
    build_tp=_build,
    shard_check=equal_shards_only(UNEVEN_REASON),
    limits={
        "z_loss": "LigerVocabParallelCrossEntropy has no z-loss (lse_square_scale is "
        "its single-device CE's only)",
        "class_weights": "its vocab-parallel CE takes no class weights",
    },
)
