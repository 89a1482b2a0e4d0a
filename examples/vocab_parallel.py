"""Vocab-parallel linear cross-entropy over torch.distributed, checked against one device.

    torchrun --nproc-per-node 2 examples/vocab_parallel.py     # CPU: gloo
    torchrun --nproc-per-node 8 examples/vocab_parallel.py     # GPUs: nccl, one per rank

Every rank holds the same hidden states and targets and its rows [start, stop) of the
classifier (Megatron's layout); each gets the full loss and dE and its own rows' dC.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from perfsuite.kernels import VocabParallel, linear_cross_entropy


def _timed(step) -> float:
    """Seconds of one fwd+bwd of ``step()``, after an untimed one (imports, warm-up)."""
    for _ in range(2):
        began = time.perf_counter()
        step().backward()
        took = time.perf_counter() - began
    return took


def main() -> None:
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else None
    n, v, d = 1024, 32000, 256
    torch.manual_seed(0)  # the same hidden states, targets and full classifier everywhere
    hidden = torch.randn(n, d, device=device)
    classifier = torch.randn(v, d, device=device) / d**0.5
    targets = torch.randint(0, v, (n,), device=device)
    targets[::10] = -100  # padding
    per = -(-v // world)
    start, stop = rank * per, min(v, (rank + 1) * per)
    options = dict(label_smoothing=0.1, z_loss=1e-4)

    e = hidden.clone().requires_grad_()
    shard = classifier[start:stop].clone().requires_grad_()
    shard_of = VocabParallel(start, stop, vocab_size=v)
    took = _timed(
        lambda: linear_cross_entropy(e, shard, targets, vocab_parallel=shard_of, **options)
    )
    loss = linear_cross_entropy(e, shard, targets, vocab_parallel=shard_of, **options).detach()

    # The same loss on one device, for the check: rank 0 first, alone (its time is the
    # comparison), then the other ranks, each for its own rows of dC.
    e1 = hidden.clone().requires_grad_()
    c1 = classifier.clone().requires_grad_()
    alone = 0.0
    for turn in (0, 1):
        if (rank == 0) == (turn == 0):
            alone = _timed(lambda: linear_cross_entropy(e1, c1, targets, **options))
        dist.barrier()
    single = linear_cross_entropy(e1, c1, targets, **options).detach()
    for x in (e, shard, e1, c1):  # the gradients of one call each
        x.grad = None
    linear_cross_entropy(e, shard, targets, vocab_parallel=shard_of, **options).backward()
    linear_cross_entropy(e1, c1, targets, **options).backward()
    errors = torch.stack([
        (loss - single).abs(),
        (e.grad - e1.grad).abs().max(),
        (shard.grad - c1.grad[start:stop]).abs().max(),
    ])  # fmt: skip
    dist.all_reduce(errors, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(
            f"{world} ranks, V={v} in shards of {per}: loss {loss.item():.6f} "
            f"(one device {single.item():.6f})"
        )
        print(
            f"fwd+bwd on rank 0: {took * 1e3:.1f} ms sharded (every rank at once), "
            f"{alone * 1e3:.1f} ms for the whole classifier alone; "
            f"{torch.get_num_threads()} thread(s) a rank"
        )
        print(
            f"max |difference| to one device: loss {errors[0]:.2e}, dE {errors[1]:.2e}, "
            f"dC {errors[2]:.2e}"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
