"""Vocab-parallel: the classifier sharded over V across a ``torch.distributed`` group. Two
O(N) all-reduces combine the shards' per-row statistics, and the backward one the fp32 dE;
no logits cross ranks (docs/kernel.md, "Vocab-parallel").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from . import terms
from .forward import ForwardResult
from .function import Params, _forward, input_grads
from .slices import slices_backward

ReduceOp = dist.ReduceOp if dist.is_available() else None


@dataclass(frozen=True)
class VocabParallel:
    """This rank's shard: rows [start, stop) of the full (V, D) classifier, over ``group``
    (None: the default one); ``vocab_size``, when given, is checked against the shards;
    ``reduce_e_grad=False`` leaves E's gradient to the caller to all-reduce."""

    start: int
    stop: int
    group: Any = None
    vocab_size: int | None = None
    reduce_e_grad: bool = True


# Layouts already checked -> V: checking every step would cost a collective and a host sync.
_CHECKED: dict[tuple, int] = {}


def shard_layout(shard: VocabParallel, rows: int, device: torch.device) -> int:
    """The full vocabulary size, once every rank has checked that the shards tile it: all
    ranks decide on the same gathered (start, stop, rows of c), so a bad layout raises the
    same one-line ``ValueError`` everywhere, with no rank left waiting in a collective."""
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("vocab_parallel needs torch.distributed initialised (init_process_group)")
    key = (shard.group, shard.start, shard.stop, rows, shard.vocab_size)
    if key in _CHECKED:
        return _CHECKED[key]
    for name in ("start", "stop"):
        value = getattr(shard, name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"vocab_parallel.{name} must be an int, got {value!r}")
    world = dist.get_world_size(shard.group)
    mine = torch.tensor([shard.start, shard.stop, rows], dtype=torch.int64, device=device)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine, group=shard.group)
    ranges = sorted(
        ((r, *(int(x) for x in t.tolist())) for r, t in enumerate(gathered)),
        key=lambda x: (x[1], x[2]),
    )
    for rank, start, stop, held in ranges:
        if stop <= start:
            raise ValueError(f"vocab shard of rank {rank} is empty or reversed: [{start}, {stop})")
        if held != stop - start:
            raise ValueError(
                f"rank {rank}: c has {held} rows but its vocab shard [{start}, {stop}) holds "
                f"{stop - start}"
            )
    layout = ", ".join(f"rank {r} [{s}, {t})" for r, s, t, _ in ranges)
    end = 0
    for _rank, start, stop, _ in ranges:
        if start != end:
            kind = "overlap" if start < end else "gap"
            raise ValueError(
                f"vocab shards do not cover [0, V): {kind} at {min(start, end)} ({layout})"
            )
        end = stop
    if shard.vocab_size is not None and shard.vocab_size != end:
        raise ValueError(
            f"vocab shards cover [0, {end}) but vocab_size is {shard.vocab_size} ({layout})"
        )
    _CHECKED[key] = end
    return end


def _combine(
    out: ForwardResult, local_t: torch.Tensor, weight: torch.Tensor | None, columns: int, group: Any
) -> tuple[ForwardResult, torch.Tensor | None, torch.Tensor | None]:
    """The global per-row statistics, w[y] and Σ w from this shard's forward result."""
    row_max = out.row_max.clone()
    dist.all_reduce(row_max, op=ReduceOp.MAX, group=group)
    safe = torch.where(torch.isfinite(row_max), row_max, 0.0)
    moved = out.row_max - safe  # ≤ 0: this shard's max relative to the global one
    parts = [(out.log_sum + moved).exp(), out.target_logit]
    if out.rel_sum is not None:
        count = float(columns) if weight is None else weight.sum()
        parts.append(out.rel_sum + count * moved)
    if weight is not None:
        hit = local_t >= 0
        parts.append(torch.where(hit, weight.index_select(0, local_t.clamp(min=0)), 0.0))
        parts.append(weight.sum().expand_as(moved))  # Σ w rides along, one value per row
    stacked = torch.stack(parts)
    dist.all_reduce(stacked, op=ReduceOp.SUM, group=group)
    rel_sum = stacked[2] if out.rel_sum is not None else None
    wy = stacked[-2] if weight is not None else None
    wsum = stacked[-1, 0] if weight is not None else None
    return ForwardResult(row_max, stacked[0].log(), stacked[1], rel_sum, None), wy, wsum


class VocabParallelFunction(torch.autograd.Function):
    """Forward on the shard + combine; backward on the shard + dE all-reduce."""

    @staticmethod
    def forward(
        ctx: Any,
        e: torch.Tensor,
        c: torch.Tensor,
        targets: torch.Tensor,
        weight: torch.Tensor | None,
        p: Params,
        shard: VocabParallel,
        vocab: int,
    ) -> Any:
        needs_grad = p.grad_mode and any(ctx.needs_input_grad[:2])
        valid = targets != p.ignore_index
        # Shard-local ids; −1 (matches no column) for ignored rows and other shards' targets.
        mine = (targets >= shard.start) & (targets < shard.stop) & valid
        local_t = torch.where(mine, targets - shard.start, -1)
        out, _ = _forward(e, c, local_t, weight, p, needs_grad)
        stats, wy, wsum = _combine(out, local_t, weight, c.shape[0], shard.group)
        loss = terms.loss(stats, (valid, wy, wsum), p, vocab)
        ctx.params, ctx.shard, ctx.vocab = p, shard, vocab
        ctx.save_for_backward(e, c, valid, local_t, weight, stats.row_max, stats.log_sum, wy, wsum)
        return (loss, stats.lse) if p.return_lse else loss

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor, *grad_lse: torch.Tensor) -> Any:
        e, c, valid, local_t, weight, row_max, log_sum, wy, wsum = ctx.saved_tensors
        p: Params = ctx.params
        rows = (valid, wy, wsum)
        k = terms.coefficients(rows, row_max + log_sum, p, ctx.vocab, grad_out, *grad_lse)
        de, dc = slices_backward(
            e, c, local_t, row_max, log_sum, k, p=p, weight=weight, de_fp32=True
        )
        if ctx.shard.reduce_e_grad:
            dist.all_reduce(de, op=ReduceOp.SUM, group=ctx.shard.group)
        return input_grads(ctx, de.to(e.dtype), dc, others=5)
