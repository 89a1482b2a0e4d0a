"""Methods across ranks built from torch alone: the naive all-gather, and ``loss_parallel``.

* ``eager``: each rank's shard logits all-gathered to the full N x V, then single-device
  eager's loss on them (every term): the naive baseline.
* ``torch-parallel``: ``torch.distributed.tensor.parallel.loss_parallel()`` with
  ``F.cross_entropy`` on the shard logits as a DTensor ``Shard(1)`` over a 1-D DeviceMesh
  of the group (its limits, checked with torch 2.13, are its ``limits``).

Both get only the shard's part of dE from ``e @ c_shard.T``; ``sum_grad_over`` sums it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from perfsuite.method import Capabilities, Case, LossFn, class_weights
from perfsuite.tp_method import ParallelMethod, Shard, shard_ranges

# The case's terms a library may lack: what asks for it, and the generic words for it.
_ASKED: dict[str, tuple[Callable[[Case], bool], str]] = {
    "label_smoothing": (lambda case: case.beta > 0, "no label smoothing"),
    "softcap": (lambda case: case.softcap is not None, "no softcap"),
    "z_loss": (lambda case: bool(case.z_loss), "no z-loss"),
    "class_weights": (lambda case: case.class_weights, "no class weights"),
}


@dataclass
class TPMethod(ParallelMethod):
    """A ``ParallelMethod`` whose capability gaps name the library's own limit.

    ``limits`` maps a Capabilities term (label_smoothing, softcap, z_loss,
    class_weights) the method lacks to why, so a result says more than "no z-loss".
    """

    limits: dict[str, str] = field(default_factory=dict)

    def unsupported_reason(self, case: Case) -> str | None:
        for term, why in self.limits.items():
            asked, words = _ASKED[term]
            if asked(case) and not getattr(self.caps, term):
                return f"{words}: {why}"
        return super().unsupported_reason(case)


class _SumGrad(torch.autograd.Function):
    """Identity forward; the backward sums E's gradient over the group."""

    @staticmethod
    def forward(ctx: Any, e: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return e.view_as(e)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def sum_grad_over(e: torch.Tensor, group: Any) -> torch.Tensor:
    """``e`` for a column-parallel head: ``e @ c_shard.T`` gives each rank only its
    shard's part of dE, and this sums the parts (in E's dtype, as Megatron's
    ``copy_to_tensor_model_parallel_region`` does) so every rank holds the full dE."""
    return _SumGrad.apply(e, group)


class _GatherColumns(torch.autograd.Function):
    """All-gather the shard logits along V; the backward keeps this shard's columns.

    Every rank computes the same loss from the same full logits, so the gradient of
    its own columns is just their slice (no reduce-scatter: that would count the
    replicated loss K times)."""

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor, shard: Shard) -> torch.Tensor:
        ranges = shard_ranges(shard.vocab, shard.world)
        width = max(stop - start for start, stop in ranges)
        padded = F.pad(local, (0, width - local.shape[1])).contiguous()
        parts = [torch.empty_like(padded) for _ in ranges]
        dist.all_gather(parts, padded, group=shard.group)
        ctx.span = (shard.start, shard.stop)
        columns = [p[:, : stop - start] for p, (start, stop) in zip(parts, ranges, strict=True)]
        return torch.cat(columns, 1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        start, stop = ctx.span
        return grad[:, start:stop].contiguous(), None


def _check_megatron_layout(shard: Shard) -> None:
    expected = shard_ranges(shard.vocab, shard.world)[shard.rank]
    if (shard.start, shard.stop) != expected:
        raise ValueError(
            f"rank {shard.rank} holds [{shard.start}, {shard.stop}) but the all-gather "
            f"assumes the shard_ranges layout {list(expected)}"
        )


def _build_eager(case: Case, c_shard: torch.Tensor, shard: Shard) -> LossFn:
    # Here, not at the top: torch_methods declares eager with this module's TP_EAGER.
    from perfsuite.baselines.torch_methods import cross_entropy_terms, softcapped

    _check_megatron_layout(shard)
    weight = class_weights(case, c_shard.device)

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = _GatherColumns.apply(sum_grad_over(e, shard.group) @ c.T, shard)
        # Single-device eager on the gathered logits: same dtype, same ops, same terms.
        return cross_entropy_terms(
            softcapped(logits, case.softcap), targets, case.beta, case.ignore_index,
            "mean", weight, case.z_loss,
        )  # fmt: skip

    return loss_fn


@functools.cache  # one DeviceMesh per (group, device type), reused by every case and call
def _mesh(group: Any, device_type: str) -> Any:
    from torch.distributed.device_mesh import DeviceMesh

    return DeviceMesh.from_group(dist.group.WORLD if group is None else group, device_type)


class _LossParallel(torch.autograd.Function):
    """``F.cross_entropy`` under ``loss_parallel()`` on the shard logits as a DTensor.

    The DTensor graph is built on a detached leaf inside the forward and replayed in
    the backward under the context again: loss_parallel's handlers exist only while
    the context is entered, and the harness calls ``backward()`` outside it."""

    @staticmethod
    def forward(
        ctx: Any,
        local: torch.Tensor,
        targets: torch.Tensor,
        mesh: Any,
        vocab: int,
        ignore_index: int,
    ) -> torch.Tensor:
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor import Shard as DShard
        from torch.distributed.tensor.parallel import loss_parallel

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
        return grad_local, None, None, None, None


def _build_loss_parallel(case: Case, c_shard: torch.Tensor, shard: Shard) -> LossFn:
    from perfsuite.baselines.torch_methods import softcapped

    _check_megatron_layout(shard)  # DTensor's Shard(1) splits V the same way
    mesh = _mesh(shard.group, c_shard.device.type)

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = softcapped(sum_grad_over(e, shard.group) @ c.T, case.softcap)
        return _LossParallel.apply(logits, targets, mesh, shard.vocab, case.ignore_index)

    return loss_fn


# Every option: on materialised logits each training term is a line of torch.
FULL = dict(label_smoothing=True, softcap=True, z_loss=True, class_weights=True)
# Eager's shard (torch_methods declares eager); torch-parallel runs only across ranks.
TP_EAGER = TPMethod(
    name="eager",
    description="shard logits in the input dtype all-gathered to N x V, then eager's "
    "F.cross_entropy (the naive baseline)",
    caps=Capabilities(**FULL),
    distributions=("torch",),
    build_tp=_build_eager,
)
METHODS = [
    TPMethod(
        name="torch-parallel",
        description="torch.distributed.tensor.parallel.loss_parallel(): F.cross_entropy on "
        "DTensor logits Shard(1) over a 1-D DeviceMesh",
        caps=Capabilities(softcap=True),
        distributions=("torch",),
        build_tp=_build_loss_parallel,
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
