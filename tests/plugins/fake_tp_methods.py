"""Multi-rank methods that misbehave on purpose (PERFSUITE_PLUGINS), so every way a
TP cell can end is provoked by a test: a rank that raises, a rank that is killed, a
rank that never reaches the collective its peers wait in, a wrong shard. Each is a
method measured only across ranks (a ``tp`` hook, no ``build``)."""

from __future__ import annotations

import os
import signal
import time

import torch

from perfsuite.baselines.torch_methods import EAGER
from perfsuite.method import AcrossRanks, Capabilities, Case, LossFn, SimpleMethod
from perfsuite.tp_method import Shard


def _gathered(misbehave: str = ""):
    """Eager's shard logits all-gathered (its ``tp`` hook), misbehaving on rank 1."""

    def build(case: Case, c_shard: torch.Tensor, shard: Shard) -> LossFn:
        eager = EAGER.tp.build(case, c_shard, shard)

        def loss_fn(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            if shard.rank == 1 and misbehave == "raise":
                raise RuntimeError("deliberate failure on rank 1")
            if shard.rank == 1 and misbehave == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if shard.rank == 1 and misbehave == "hang":
                time.sleep(3600)
            loss = eager(e, c, t)
            return loss * 1.01 if misbehave == "wrong" else loss

        return loss_fn

    return build


METHODS = [
    SimpleMethod(name, f"all-gathered logits, {misbehave or 'exact'}",
                 caps=Capabilities(label_smoothing=True), tp=AcrossRanks(_gathered(misbehave)))
    for name, misbehave in [("tp-gather", ""), ("tp-wrong", "wrong"), ("tp-raises", "raise"),
                            ("tp-killed", "kill"), ("tp-hangs", "hang")]
]  # fmt: skip
