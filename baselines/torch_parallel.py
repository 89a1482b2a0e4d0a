"""``torch-parallel``, measured only across ranks: ``loss_parallel()`` with
``F.cross_entropy`` on the shard logits as a DTensor ``Shard(1)`` (its limits checked with
torch 2.13); ``SumGradOver`` sums the shard parts of dE."""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from perfsuite.baselines.torch_methods import softcapped
from perfsuite.method import AcrossRanks, Capabilities, Case, LossFn, SimpleMethod
from perfsuite.tp_method import Shard, SumGradOver, check_layout


@functools.cache  # one DeviceMesh per (group, device type), reused by every case and call
def _mesh(group: Any, device_type: str) -> Any:
    from torch.distributed.device_mesh import DeviceMesh

    return DeviceMesh.from_group(dist.group.WORLD if group is None else group, device_type)


class _LossParallel(torch.autograd.Function):
    """``F.cross_entropy`` under ``loss_parallel()`` on the shard logits as a DTensor, its
    graph built on a detached leaf and replayed in the backward under the context again:
    its handlers exist only inside it, and the harness calls ``backward()`` outside."""

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor, targets: torch.Tensor, spec: tuple) -> torch.Tensor:
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor import Shard as DShard
        from torch.distributed.tensor.parallel import loss_parallel

        mesh, vocab, ignore_index = spec
        with torch.enable_grad():
            leaf = local.detach().requires_grad_(local.requires_grad)
            logits = DTensor.from_local(
                leaf, mesh, [DShard(1)], run_check=False,
                shape=(local.shape[0], vocab), stride=(vocab, 1),
            )  # fmt: skip
            with loss_parallel():
                loss = F.cross_entropy(
                    logits, targets, ignore_index=ignore_index, reduction="mean"
                ).to_local()
        ctx.graph = (leaf, loss)
        return loss.detach()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        from torch.distributed.tensor.parallel import loss_parallel

        leaf, loss = ctx.graph
        del ctx.graph
        with loss_parallel():
            (grad_local,) = torch.autograd.grad(loss, leaf, grad)
        return grad_local, None, None


def _build_loss_parallel(case: Case, c_shard: torch.Tensor, shard: Shard) -> LossFn:
    check_layout(shard)  # DTensor's Shard(1) splits V the same way
    mesh = _mesh(shard.group, c_shard.device.type)

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = softcapped(SumGradOver.apply(e, shard.group) @ c.T, case.softcap)
        return _LossParallel.apply(logits, targets, (mesh, shard.vocab, case.ignore_index))

    return loss_fn


METHODS = [
    SimpleMethod(
        name="torch-parallel",
        description="torch.distributed.tensor.parallel.loss_parallel(): F.cross_entropy on "
        "DTensor logits Shard(1) over a 1-D DeviceMesh",
        caps=Capabilities(softcap=True),
        tp=AcrossRanks(_build_loss_parallel),
        limits={
            "label_smoothing": "loss_parallel() does not support it (torch's docstring; "
            "F.cross_entropy raises 'aten.masked_fill_.Scalar got mixed torch.Tensor and "
            "DTensor' inside it)",
            "z_loss": "loss_parallel() handles only F.cross_entropy's own terms",
            "class_weights": "loss_parallel()'s backward gathers the weights at the raw "
            "targets, so any ignore_index row raises 'index -100 is out of bounds'",
        },
    ),
]
