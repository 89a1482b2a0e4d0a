"""Vocab-parallel over torch.distributed (gloo on CPU) against the unsharded kernel: one
process group per test runs every case; each rank checks its loss, LSE, dE and dC rows
against the fp32 reference (helpers' tolerance rule) and against one device's kernel.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from helpers import assert_within_rule, full_loss, make_inputs
from ranks import fork_ranks

from perfsuite.kernels import VocabParallel, linear_cross_entropy
from perfsuite.kernels.configs import interpreting

# (N, V, D, dtype, beta, softcap, reduction, weighted, z_loss, engine)
CASES = [
    (40, 301, 24, torch.float32, 0.1, None, "mean", True, 1e-2, "torch"),
    (40, 301, 24, torch.float32, 0.0, 20.0, "sum", False, 0.0, "torch"),
    (40, 301, 24, torch.float32, 0.1, 20.0, "none", True, 1e-2, "torch"),
    (40, 301, 24, torch.bfloat16, 0.1, 20.0, "mean", True, 1e-2, "torch"),
    (24, 130, 16, torch.float32, 0.1, 20.0, "mean", True, 1e-2, "triton"),
]


def _split(vocab: int, world: int) -> list[tuple[int, int]]:
    """Uneven shards: the last rank's is the smallest (301 over 4: 100, 101, 50, 50)."""
    if world == 2:
        cuts = [0, vocab // 3, vocab]
    else:
        cuts = [0, 100, 201, 251, vocab] if vocab == 301 else [0, 40, 80, 110, vocab]
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def _run(fn, e, c, t, upstream, **kwargs):
    e = e.detach().clone().requires_grad_()
    c = c.detach().clone().requires_grad_()
    loss, lse = fn(e, c, t, **kwargs)
    ((loss * upstream).sum() + 0.01 * lse.square().sum()).backward()
    return loss.detach(), lse.detach(), e.grad, c.grad


def _check_case(rank: int, world: int, case: tuple) -> None:
    n, v, d, dtype, beta, softcap, reduction, weighted, z_loss, engine = case
    torch.manual_seed(0)
    e, c, t = make_inputs(n, v, d, dtype, "cpu")
    weight = torch.rand(v) * 2 if weighted else None
    if weight is not None:
        weight[::7] = 0.0
    upstream = torch.rand(n if reduction == "none" else ()) + 0.5
    start, stop = _split(v, world)[rank]
    opts = dict(label_smoothing=beta, softcap=softcap, reduction=reduction, z_loss=z_loss)
    shard = VocabParallel(start, stop, vocab_size=v)
    ours = _run(
        linear_cross_entropy, e, c[start:stop], t, upstream, return_lse=True, engine=engine,
        vocab_parallel=shard, weight=None if weight is None else weight[start:stop], **opts,
    )  # fmt: skip
    single = _run(
        linear_cross_entropy, e, c, t, upstream, return_lse=True, engine=engine,
        weight=weight, **opts,
    )  # fmt: skip

    def reference(e, c, t, upcast=True):
        logits = softcap * torch.tanh((e.float() @ c.float().T) / softcap) if softcap else None
        lse = torch.logsumexp(logits if logits is not None else e.float() @ c.float().T, -1)
        loss = full_loss(e, c, t, beta, softcap, reduction, weight, z_loss, upcast)
        return loss, lse

    ref = _run(reference, e, c, t, upstream)
    same = _run(lambda *a: reference(*a, upcast=False), e, c, t, upstream)
    names = ("loss", "lse", "dE", "dC")
    ours = (*ours[:3], ours[3])
    ref = (*ref[:3], ref[3][start:stop])
    same = (*same[:3], same[3][start:stop])
    single = (*single[:3], single[3][start:stop])
    assert_within_rule(dtype, names, ours, ref, same)
    if dtype == torch.float32:
        for a, one in zip(ours, single, strict=True):
            torch.testing.assert_close(a, one, rtol=1e-4, atol=1e-6)


def _bad_layouts(rank: int, world: int) -> None:
    e, c, t = make_inputs(8, 64, 8, torch.float32, "cpu")
    bad = {
        "gap": ([(0, 30), (40, 64)], None, "gap at 30"),
        "overlap": ([(0, 40), (30, 64)], None, "overlap at 30"),
        "not from 0": ([(10, 40), (40, 64)], None, "gap at 0"),
        "short": ([(0, 32), (32, 64)], 100, "vocab_size is 100"),
        "rows": ([(0, 32), (32, 60)], None, "c has 32 rows but its vocab shard [32, 60)"),
    }
    for name, (ranges, vocab_size, words) in bad.items():
        start, stop = ranges[rank]
        rows = c[rank * 32 : rank * 32 + 32] if name == "rows" else c[start:stop]
        with pytest.raises(ValueError) as info:
            linear_cross_entropy(
                e, rows, t, vocab_parallel=VocabParallel(start, stop, vocab_size=vocab_size)
            )
        assert words in str(info.value) and "\n" not in str(info.value), (name, info.value)
    # A target past the full vocabulary (64) is refused on every rank alike.
    t_bad = t.clone()
    t_bad[1] = 64
    with pytest.raises(ValueError, match="targets out of range: 64 not in \\[0, 64\\)"):
        linear_cross_entropy(e, c[rank * 32 : rank * 32 + 32], t_bad,
                             vocab_parallel=VocabParallel(rank * 32, rank * 32 + 32))  # fmt: skip


def _checked_once(rank: int, world: int) -> None:
    """A layout is checked once: the next calls run no layout collective (no host sync)."""
    from perfsuite.kernels import parallel

    e, c, t = make_inputs(8, 64, 8, torch.float32, "cpu")
    shard = VocabParallel(rank * 32, rank * 32 + 32)
    first = linear_cross_entropy(e, c[rank * 32 : rank * 32 + 32], t, vocab_parallel=shard)
    calls = []
    real = parallel.dist.all_gather
    parallel.dist.all_gather = lambda *a, **k: calls.append(a)
    try:
        again = linear_cross_entropy(e, c[rank * 32 : rank * 32 + 32], t, vocab_parallel=shard)
    finally:
        parallel.dist.all_gather = real
    assert calls == [] and torch.equal(first, again)


def _compiled(rank: int, world: int) -> None:
    """torch.compile of a sharded step equals eager; its only break is the target check
    (a host read that keeps a bad target an error under compile: no silent assert). The
    torch engine: dynamo cannot trace the Triton interpreter's Python. Rank 0 compiles
    (~3 s a rank); the others' eager steps, against its compiled collectives, equal theirs
    against its eager ones."""
    from torch._dynamo.backends.debugging import ExplainWithBackend

    e, c, t = make_inputs(16, 64, 8, torch.float32, "cpu")
    shard = VocabParallel(rank * 32, rank * 32 + 32)
    rows = c[rank * 32 : rank * 32 + 32]

    def step(e, c, t):
        return linear_cross_entropy(
            e, c, t, label_smoothing=0.1, softcap=20.0, vocab_parallel=shard, engine="torch"
        )

    eager = _run(lambda *a: (step(*a), torch.zeros(())), e, rows, t, torch.ones(()))
    explained = ExplainWithBackend("aot_eager")  # its graphs counted as dynamo.explain does
    compiled_step = torch.compile(step, backend=explained) if rank == 0 else step
    compiled = _run(lambda *a: (compiled_step(*a), torch.zeros(())), e, rows, t, torch.ones(()))
    for name, a, b in zip(
        ("loss", "dE", "dC"), (eager[0], *eager[2:]), (compiled[0], *compiled[2:]), strict=True
    ):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7, msg=name)
    assert explained.output().graph_break_count <= 1, explained.break_reasons
    bad = t.clone()
    bad[3] = 64
    with pytest.raises(ValueError, match="targets out of range: 64"):
        compiled_step(e, rows, bad)


def _worker(rank: int, world: int, store: str, jobs: list[str]) -> None:
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        for job in jobs:
            if job == "bad":
                _bad_layouts(rank, world)
            elif job == "cached":
                _checked_once(rank, world)
            elif job == "compiled":
                _compiled(rank, world)
            else:
                _check_case(rank, world, CASES[int(job)])
    finally:
        dist.destroy_process_group()


def _spawn(world: int, jobs: list[str], tmp_path: Path) -> None:
    # One thread a rank (torch's and numpy's BLAS read these when the rank imports
    # them): the ranks share 2 cores, and thread teams waiting on each other cost more.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OMP_NUM_THREADS", "1")
        env.setenv("OPENBLAS_NUM_THREADS", "1")
        # what torch.compile loads on its first call (~2.5 s a process), once
        preload = ("torch._functorch.aot_autograd", "torch._inductor.compile_fx")
        fork_ranks(_worker, world, (str(tmp_path / "store"), jobs), preload)


def _cases(*wanted: int) -> list[str]:
    """Case ids; the Triton one only under the interpreter (the ranks run on CPU, gloo)."""
    return [str(i) for i in wanted if CASES[i][-1] == "torch" or interpreting()]


@pytest.mark.integration
def test_two_ranks_every_case_and_bad_layouts(tmp_path: Path) -> None:
    _spawn(2, _cases(*range(len(CASES))) + ["bad", "cached", "compiled"], tmp_path)


@pytest.mark.integration
@pytest.mark.slow  # 7-30 s of ranks, workers or compiles here; `-m slow` runs it
def test_four_uneven_ranks(tmp_path: Path) -> None:
    _spawn(4, _cases(0, 2, 4), tmp_path)


def test_without_a_process_group_is_one_line() -> None:
    e, c, t = make_inputs(8, 64, 8, torch.float32, "cpu")
    with pytest.raises(ValueError, match="needs torch.distributed initialised"):
        linear_cross_entropy(e, c, t, vocab_parallel=VocabParallel(0, 64))
