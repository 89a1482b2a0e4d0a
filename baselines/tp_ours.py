"""Our kernel across ranks: ``linear_cross_entropy(..., vocab_parallel=VocabParallel(...))``.

No logits cross ranks: two all-reduces of per-row statistics in the forward, and the
fp32 dE summed across ranks in the backward (kernels/parallel.py). Every term runs:
smoothing, softcap, z-loss, and class weights (this shard's slice of them). As on one
device (baselines/ours.py), the slice backward runs natively on CPU (engine "torch") and
as the Triton kernel on a GPU.
"""

from __future__ import annotations

import torch

from perfsuite.method import Capabilities, Case, LossFn, class_weights
from perfsuite.tp_method import ParallelMethod, Shard


def _build(case: Case, c_shard: torch.Tensor, shard: Shard) -> LossFn:
    # Imported here: the registry must load without triton installed.
    from perfsuite.kernels import VocabParallel, linear_cross_entropy

    layout = VocabParallel(shard.start, shard.stop, group=shard.group, vocab_size=shard.vocab)
    engine = "torch" if case.device == "cpu" else "triton"
    weight = class_weights(case, c_shard.device)
    if weight is not None:
        weight = weight[shard.start : shard.stop].contiguous()

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(
            e, c, targets, label_smoothing=case.beta, softcap=case.softcap,
            ignore_index=case.ignore_index, weight=weight, z_loss=case.z_loss,
            vocab_parallel=layout, engine=engine,
        )  # fmt: skip

    return loss_fn


TP_OURS = ParallelMethod(
    name="ours",
    description="our kernel with vocab_parallel: per-row statistics all-reduced, exact "
    "slice backward, fp32 dE summed across ranks",
    caps=Capabilities(
        label_smoothing=True,
        softcap=True,
        z_loss=True,
        class_weights=True,
        materializes_logits=False,
    ),
    requires=("triton",),
    distributions=("triton", "torch"),
    build_tp=_build,
)
