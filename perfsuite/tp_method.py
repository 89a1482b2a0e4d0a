"""The layout across ranks (docs/scale-out.md): every rank holds E, the targets and rows
[start, stop) of C (``shard_ranges``); a method's ``tp`` hook's ``loss_fn(e, c_shard, targets)``,
called by every rank together, gives the global loss, the full dE and this shard's dC."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from perfsuite.method import Case


@dataclass(frozen=True)
class Shard:
    """This rank's piece of a vocab-parallel problem."""

    rank: int
    world: int
    start: int
    stop: int
    vocab: int
    # The torch.distributed process group every rank of the cell is in (None: default).
    group: Any = None


def shard_ranges(vocab: int, world: int) -> list[tuple[int, int]]:
    """[start, stop) of each rank: ``ceil(V / K)`` rows each, the last rank the rest; a split
    that leaves a rank none is refused (V = 9 over K = 4 would give 3, 3, 3, 0)."""
    if world < 1:
        raise ValueError(f"tensor-parallel size must be >= 1, got {world}")
    per = -(-vocab // world)
    ranges = [(min(r * per, vocab), min((r + 1) * per, vocab)) for r in range(world)]
    if empty := [r for r, (start, stop) in enumerate(ranges) if stop <= start]:
        raise ValueError(
            f"V={vocab} over TP={world} leaves rank {empty[0]} no vocabulary rows "
            f"(ceil(V/TP) = {per} a rank)"
        )
    return ranges


def check_layout(shard: Shard) -> None:
    """Refuse a shard other than ``shard_ranges``'s (as an all-gather and DTensor split V)."""
    expected = shard_ranges(shard.vocab, shard.world)[shard.rank]
    if (shard.start, shard.stop) != expected:
        raise ValueError(
            f"rank {shard.rank} holds [{shard.start}, {shard.stop}) but the all-gather "
            f"assumes the shard_ranges layout {list(expected)}"
        )


class SumGradOver(torch.autograd.Function):
    """``SumGradOver.apply(e, group)``: ``e``, whose backward sums each rank's part of dE (in E's
    dtype, as Megatron's ``copy_to_tensor_model_parallel_region``) into the full dE."""

    @staticmethod
    def forward(ctx: Any, e: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return e.view_as(e)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        import torch.distributed as dist

        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def equal_shards_only(reason: str) -> Callable[[Case, Shard], str | None]:
    """A ``shard_check`` for a library that places rank r's shard at r x its own size:
    ``reason`` (with ``{sizes}``) for an uneven layout, None for an even one."""

    def check(case: Case, shard: Shard) -> str | None:
        if shard.vocab % shard.world == 0:
            return None
        per = -(-shard.vocab // shard.world)
        last = shard.vocab - per * (shard.world - 1)
        return reason.format(
            sizes=f"V={shard.vocab} over TP={shard.world}: {per} a rank, the last {last}"
        )

    return check


# Keys of a worker's case dict that are not ``Case`` fields (a step's: its model's size).
CASE_EXTRAS = ("shape", "workload", "tp", "timer", "layers", "seq", "batch")


def case_of(raw: dict[str, Any]) -> Case:
    """The ``Case`` of a worker's case dict (``Plan.cases``)."""
    return Case(**{k: v for k, v in raw.items() if k not in CASE_EXTRAS})


def case_reason(method: Any, raw: dict[str, Any]) -> str | None:
    """Why ``method`` cannot compute the case dict ``raw`` exactly (None: it can): its
    capabilities, and at a TP size the layout (rank 0's shard: every rank's checks agree)."""
    case = case_of(raw)
    tp = raw.get("tp")
    if tp is None:
        return method.unsupported_reason(case)
    try:
        start, stop = shard_ranges(case.vocab, tp)[0]
    except ValueError as err:
        return str(err)
    return method.unsupported_at(case, Shard(0, tp, start, stop, case.vocab))
