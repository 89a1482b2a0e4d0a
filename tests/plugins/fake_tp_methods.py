"""Multi-rank methods that misbehave on purpose (PERFSUITE_PLUGINS), so every way a
TP cell can end is provoked by a test: a rank that raises, a rank that is killed, a
rank that never reaches the collective its peers wait in, a wrong shard. Each is a
method measured only across ranks (a ``tp`` hook, no ``build``)."""

from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed as dist

from perfsuite.method import AcrossRanks, Capabilities, Case, LossFn, SimpleMethod
from perfsuite.tp_method import Shard


class _Gather(torch.autograd.Function):
    """Full logits from every rank's columns; backward keeps this rank's columns (each
    rank computes the same loss from the same logits)."""

    @staticmethod
    def forward(ctx, part: torch.Tensor, shard: Shard) -> torch.Tensor:
        per = -(-shard.vocab // shard.world)
        padded = torch.nn.functional.pad(part, (0, per - part.shape[1]))
        pieces = [torch.empty_like(padded) for _ in range(shard.world)]
        dist.all_gather(pieces, padded.contiguous())
        ctx.shard = shard
        return torch.cat(pieces, dim=1)[:, : shard.vocab]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad[:, ctx.shard.start : ctx.shard.stop], None


class _Reduce(torch.autograd.Function):
    """Identity forward; the backward sums dE over ranks."""

    @staticmethod
    def forward(ctx, e: torch.Tensor) -> torch.Tensor:
        return e.view_as(e)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad


def _gathered(misbehave: str = ""):
    def build(case: Case, c_shard: torch.Tensor, shard: Shard) -> LossFn:
        def loss_fn(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            if shard.rank == 1 and misbehave == "raise":
                raise RuntimeError("deliberate failure on rank 1")
            if shard.rank == 1 and misbehave == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if shard.rank == 1 and misbehave == "hang":
                time.sleep(3600)
            logits = _Gather.apply(_Reduce.apply(e).float() @ c.float().T, shard)
            loss = torch.nn.functional.cross_entropy(
                logits, t, label_smoothing=case.beta, ignore_index=case.ignore_index
            )
            return loss * 1.01 if misbehave == "wrong" else loss

        return loss_fn

    return build


def _method(name: str, misbehave: str = "") -> SimpleMethod:
    return SimpleMethod(
        name=name,
        description=f"all-gathered logits, {misbehave or 'exact'}",
        caps=Capabilities(label_smoothing=True),
        tp=AcrossRanks(_gathered(misbehave)),
    )


METHODS = [
    _method("tp-gather"),
    _method("tp-wrong", "wrong"),
    _method("tp-raises", "raise"),
    _method("tp-killed", "kill"),
    _method("tp-hangs", "hang"),
]
