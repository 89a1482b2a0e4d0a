"""Megatron-core's vocab-parallel cross-entropy as a Megatron GPT head uses it, softcap on
the shard logits (elementwise: exact). It has no ignore_index (megatron-core 0.16.1):
ignored rows get target 0 and are dropped from the mean."""

from __future__ import annotations

import torch

from perfsuite import method as _method
from perfsuite.baselines.torch_methods import softcapped
from perfsuite.method import AcrossRanks, Capabilities, Case, LossFn, SimpleMethod, Unavailable
from perfsuite.tp_method import Shard, equal_shards_only

UNEVEN_REASON = (
    "Megatron's vocab_parallel_cross_entropy places rank r's shard at r x its own size "
    "(VocabUtility.vocab_range_from_per_partition_vocab_size): uneven shards "
    "({sizes}) would read the last rank's targets at the wrong offset"
)


def _init_parallel_state(shard: Shard) -> None:
    """Megatron's TP group over the default world, once per process."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    world = dist.get_world_size()
    if dist.get_world_size(shard.group) != world:
        raise _method.Unsupported(
            f"parallel_state builds its TP group over the default world ({world} ranks), "
            f"not over a {shard.world}-rank subgroup"
        )
    if not parallel_state.model_parallel_is_initialized():
        # The NCCL (or, on CPU, gloo) groups Megatron uses; no extra gloo copies.
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=world, create_gloo_process_groups=False
        )
    size = parallel_state.get_tensor_model_parallel_world_size()
    if size != shard.world or parallel_state.get_tensor_model_parallel_rank() != shard.rank:
        raise Unavailable(
            f"megatron's parallel_state is already initialised with TP={size}, "
            f"this cell needs TP={shard.world}"
        )


def _build(case: Case, c_shard: torch.Tensor, shard: Shard) -> LossFn:
    tp = _method.imported("megatron.core.tensor_parallel")
    _init_parallel_state(shard)

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = softcapped(tp.copy_to_tensor_model_parallel_region(e) @ c.T, case.softcap)
        kept = targets != case.ignore_index
        losses = tp.vocab_parallel_cross_entropy(logits, torch.where(kept, targets, 0), 0.0)
        return torch.where(kept, losses, 0.0).sum() / kept.sum()

    return loss_fn


METHODS = [  # measured only across ranks
    SimpleMethod(
        name="megatron",
        description="megatron-core tensor_parallel.vocab_parallel_cross_entropy on the "
        "shard logits (fp32 upcast; ignored rows masked by the adapter)",
        caps=Capabilities(softcap=True),
        requires=("megatron",),
        distributions=("megatron-core",),
        pip=("megatron-core==0.16.1",),
        tp=AcrossRanks(_build, shard_check=equal_shards_only(UNEVEN_REASON)),
        limits={
            "label_smoothing": "Megatron's vocab-parallel smoothing uses the rank's "
            "partition size and its local mean log-probability (no all-reduce): at TP > 1 "
            "each rank gets a different, wrong loss (NVIDIA/Megatron-LM#737)",
            "z_loss": "vocab_parallel_cross_entropy computes the cross-entropy only",
            "class_weights": "vocab_parallel_cross_entropy takes no class weights",
        },
    ),
]
