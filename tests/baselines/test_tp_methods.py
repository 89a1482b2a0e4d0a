"""The methods across ranks (each method's ``tp`` hook, baselines/) in gloo process groups on CPU.

One process group per TP size runs every job: each rank builds the suite's full inputs
(every 7th target ignored), keeps its shard_ranges rows of C, runs the method, and
checks its loss, the full dE and its dC rows against the fp32 reference on the whole
classifier with the suite's own gate (perfsuite.run.correctness, CCE's rule); every
rank must also get the same loss. A failing assertion in any rank fails the test,
with that rank's traceback. V = 301 splits unevenly (151/150 over 2, 76/76/76/73 over
4); Megatron's and Liger's losses need even shards and run at V = 300.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import socket
import sys
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist
from ranks import fork_ranks

from perfsuite.method import AcrossRanks, Case, SimpleMethod, Unsupported
from perfsuite.tp_method import Shard, shard_ranges

N, D = 32, 32
UNEVEN, EVEN = 301, 300
SOFTCAP = 20.0
# Every term at once: what eager and ours support.
TERMS = {"beta": 0.1, "softcap": SOFTCAP, "z_loss": 1e-3, "class_weights": True}


@dataclass(frozen=True)
class Job:
    """One check every rank runs: ``expect`` is "pass" (the gate), "unsupported"
    (prepare_tp refuses, naming ``words``), "all-ignored" or "wrong" (must fail)."""

    method: str
    case: dict[str, Any] = field(default_factory=dict)
    expect: str = "pass"
    words: str = ""


def _case(**kw: Any) -> Case:
    base = dict(tokens=N, vocab=UNEVEN, hidden=D, dtype="fp32", device="cpu")
    return Case(**{**base, **kw})


def _method(name: str) -> SimpleMethod:
    from perfsuite.plan.registry import methods_for

    if name == "eager-no-dE-sum":
        return _no_de_sum()
    return methods_for("tp")[name]


def _no_de_sum() -> SimpleMethod:
    """Negative control: eager that forgets the dE all-reduce (each rank keeps only its
    shard's part of dE, as ``e @ c_shard.T`` alone gives)."""
    from perfsuite.baselines import torch_methods

    def build(case: Case, c_shard: torch.Tensor, shard: Shard):
        def loss_fn(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            logits = torch_methods._GatherColumns.apply(e @ c.T, shard)
            return torch.nn.functional.cross_entropy(logits, t, label_smoothing=case.beta)

        return loss_fn

    return replace(_method("eager"), name="eager-no-dE-sum", tp=AcrossRanks(build))


def _inputs(case: Case, all_ignored: bool = False):
    from perfsuite.run.inputs import make_inputs

    inputs = make_inputs(case, seed=0)
    inputs.targets[::7] = case.ignore_index
    if all_ignored:
        inputs.targets.fill_(case.ignore_index)
    return inputs


def _same_on_every_rank(value: float, world: int, what: str) -> None:
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, value)
    same = all((math.isnan(g) and math.isnan(value)) or g == value for g in gathered)
    assert same, f"{what}: ranks disagree on the loss: {gathered}"


def _run_job(job: Job, rank: int, world: int) -> None:
    from perfsuite.run.correctness import (
        Outcome,
        UnusableInputs,
        check_reference,
        judge,
        reference_outcome,
        run_once,
        tolerances,
        torch_error_outcome,
    )
    from perfsuite.run.inputs import Inputs

    case = _case(**job.case)
    what = f"{job.method} {job.case} TP={world} rank {rank}"
    start, stop = shard_ranges(case.vocab, world)[rank]
    shard = Shard(rank, world, start, stop, case.vocab)
    method = _method(job.method)
    inputs = _inputs(case, all_ignored=job.expect == "all-ignored")
    c_shard = inputs.c.detach()[start:stop].clone().requires_grad_(True)
    mine = Inputs(inputs.e, c_shard, inputs.targets)

    if job.expect == "unsupported":
        reason = method.unsupported_at(case, shard)
        assert reason is not None and job.words in reason, (what, reason)
        with pytest.raises(Unsupported, match=re.escape(job.words)):
            method.prepare_tp(case, c_shard, shard)
        return
    assert method.unsupported_at(case, shard) is None, (what, method.unsupported_at(case, shard))
    loss_fn = method.prepare_tp(case, c_shard, shard)
    outcome = run_once(loss_fn, mine)
    _same_on_every_rank(float(outcome.loss), world, what)
    reference = reference_outcome(case, inputs)

    if job.expect == "all-ignored":
        # The reference (torch's mean over no token) is NaN: the suite refuses to judge.
        with pytest.raises(UnusableInputs, match="every target is ignore_index"):
            check_reference(reference, inputs)
        # Torch's definition (NaN) for the libraries, ours' documented 0; no gradient.
        expected = 0.0 if job.method == "ours" else float("nan")
        loss = float(outcome.loss)
        assert loss == expected or (math.isnan(loss) and math.isnan(expected)), (what, loss)
        for q in ("grad_e", "grad_c"):
            assert torch.equal(outcome.get(q), torch.zeros_like(outcome.get(q))), (what, q)
        return

    bounds = tolerances(case.dtype, reference, torch_error_outcome(case, inputs))
    rows = Outcome(reference.loss, reference.grad_e, reference.grad_c[start:stop])
    verdict = judge(outcome, rows, bounds)
    if job.expect == "wrong":
        assert not verdict.passed and "grad_e" in verdict.explain(), (what, verdict)
        assert verdict.errors["loss"] <= bounds["loss"], (what, verdict)
        assert verdict.errors["grad_c"] <= bounds["grad_c"], (what, verdict)
        return
    assert verdict.passed, f"{what}: {verdict.explain()}"
    # As the harness's bwd phase: the loss now, its backward later, outside any context.
    loss = loss_fn(inputs.e, c_shard, inputs.targets)
    later = run_once(loss_fn, mine)  # another whole step in between
    loss.backward()
    assert torch.equal(inputs.e.grad.float(), later.grad_e), what
    assert torch.equal(c_shard.grad.float(), later.grad_c), what


def _library_facts(rank: int, world: int) -> None:
    """What the adapters declare unsupported really fails in the libraries (so a fixed
    library shows up here, and its capability can be turned on)."""
    import torch.nn.functional as F
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor import Shard as DShard
    from torch.distributed.tensor.parallel import loss_parallel

    from perfsuite.baselines.torch_parallel import _mesh

    torch.manual_seed(0)
    logits = torch.randn(8, EVEN)
    per = EVEN // world
    targets = torch.randint(0, EVEN, (8,))
    local = logits[:, rank * per : (rank + 1) * per]

    def parallel_ce(**kwargs: Any) -> None:
        leaf = local.clone().requires_grad_(True)
        dt = DTensor.from_local(leaf, _mesh(None, "cpu"), [DShard(1)], run_check=False)
        with loss_parallel():
            F.cross_entropy(dt, kwargs.pop("t", targets), **kwargs).to_local().backward()

    with pytest.raises(RuntimeError, match="mixed torch.Tensor and DTensor"):
        parallel_ce(label_smoothing=0.1)
    ignored = targets.clone()
    ignored[0] = -100
    parallel_ce(weight=torch.rand(EVEN))  # weights without an ignored target: fine
    with pytest.raises((RuntimeError, IndexError), match="out of bounds"):
        parallel_ce(weight=torch.rand(EVEN), t=ignored)

    # Megatron's smoothing at TP > 1: each rank a different loss (Megatron-LM#737).
    from perfsuite.baselines.megatron import _init_parallel_state

    _init_parallel_state(Shard(rank, world, rank * per, (rank + 1) * per, EVEN))
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    losses = vocab_parallel_cross_entropy(local.clone(), targets, 0.1)
    gathered = [torch.empty_like(losses) for _ in range(world)]
    dist.all_gather(gathered, losses)
    assert not torch.allclose(gathered[0], gathered[1], rtol=1e-4), "Megatron#737 fixed?"


def _worker(rank: int, world: int, port: int, jobs: list[Job]) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=timedelta(seconds=120),
    )  # fmt: skip
    try:
        for job in jobs:
            if job.method == "library-facts":
                _library_facts(rank, world)
            else:
                _run_job(job, rank, world)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Imported once by each group's launcher, not by every rank: torch, DTensor
# (torch._dynamo), megatron-core and liger cost seconds each per process on 2 cores.
_PRELOAD = (
    "torch.distributed.tensor.parallel",
    "perfsuite.plan.registry",
    "perfsuite.run.correctness",
    "perfsuite.run.inputs",
    "perfsuite.kernels",
    "megatron.core.tensor_parallel",
    "liger_kernel.transformers.vocab_parallel_cross_entropy",
)


def _wrapped_imported() -> list[str]:
    """The wrapped libraries that the registry and every method's availability import:
    none, so a missing or broken one breaks no method list."""
    from perfsuite.plan.registry import all_methods

    methods = all_methods()
    for method in methods.values():
        method.availability("cpu"), method.availability("cuda")
    wrapped = {r.split(".")[0] for m in methods.values() for r in m.requires}
    assert wrapped >= {"megatron", "liger_kernel", "cut_cross_entropy", "torchtune", "quack"}
    return sorted(wrapped & set(sys.modules))


def _registry_imports_nothing() -> None:
    """In the fresh launcher, before the preload: the registry imports no wrapped library.
    The ranks run on CPU (gloo) even where CUDA is: Liger's kernels need the interpreter,
    set before import."""
    os.environ["TRITON_INTERPRET"] = "1"
    assert _wrapped_imported() == [], "the registry imported a wrapped library"


def _spawn(world: int, jobs: list[Job]) -> None:
    fork_ranks(_worker, world, (_free_port(), jobs), _PRELOAD, _registry_imports_nothing)


def _have(*modules: str) -> bool:
    from perfsuite.method import missing_packages

    return not missing_packages(*modules)


MEGATRON = _have("megatron")
LIGER = _have("liger_kernel", "triton")


def _only_installed(jobs: list[Job]) -> list[Job]:
    """Jobs whose packages are here (the rest are covered by their availability)."""
    needs = {"megatron": MEGATRON, "liger": LIGER, "library-facts": MEGATRON}
    return [j for j in jobs if needs.get(j.method, True) or j.expect == "unsupported"]


def _unsupported(method: str, words: str, **case: Any) -> Job:
    return Job(method, case, "unsupported", words)


# Each method's one fast case asserting loss and gradients, its refusals, an
# all-ignored batch, and the negative control.
TWO_RANKS = [
    Job("eager", {"dtype": "bf16", **TERMS}),
    Job("torch-parallel", {"dtype": "bf16", "softcap": SOFTCAP}),
    _unsupported("torch-parallel", "no label smoothing: loss_parallel", beta=0.1),
    _unsupported("torch-parallel", "no class weights: loss_parallel", class_weights=True),
    _unsupported("torch-parallel", "no z-loss", z_loss=1e-3),
    Job("ours", {"dtype": "bf16", **TERMS}),
    Job("megatron", {"vocab": EVEN, "softcap": SOFTCAP}),
    _unsupported("megatron", "uneven shards (V=301 over TP=2: 151 a rank, the last 150)"),
    _unsupported("megatron", "Megatron-LM#737", vocab=EVEN, beta=0.1),
    Job("liger", {"vocab": EVEN, "dtype": "bf16", "beta": 0.1, "softcap": SOFTCAP}),
    _unsupported("liger", "uneven shards", vocab=UNEVEN),
    _unsupported("liger", "no z-loss", vocab=EVEN, z_loss=1e-3),
    *(Job(m, {"vocab": EVEN}, "all-ignored") for m in ("eager", "torch-parallel", "ours")),
    Job("megatron", {"vocab": EVEN}, "all-ignored"),
    Job("liger", {"vocab": EVEN, "beta": 0.1}, "all-ignored"),
    Job("eager-no-dE-sum", {"beta": 0.1}, "wrong"),
    Job("library-facts"),
]

# What the grid's own reasons cannot say: the arithmetic of four uneven shards, and the
# negative control at TP=4 (the grid's TP=4 run takes these too).
FOUR_RANKS = [
    _unsupported("megatron", "V=301 over TP=4: 76 a rank, the last 73"),
    _unsupported("liger", "V=301 over TP=4: 76 a rank, the last 73"),
    Job("eager-no-dE-sum", {}, "wrong"),
]


@pytest.mark.integration
def test_two_ranks_every_method() -> None:
    _spawn(2, _only_installed(TWO_RANKS))


def _grid(world: int) -> list[Job]:
    """Every method x dtype x smoothing x softcap (+ z-loss and class weights): each
    combination passes the gate or is refused with a reason (which the job checks)."""
    from perfsuite.plan.registry import methods_for

    jobs = []
    terms = ({}, {"z_loss": 1e-3, "class_weights": True})
    grid = itertools.product(("fp32", "bf16"), (0.0, 0.1), (None, SOFTCAP), terms, (UNEVEN, EVEN))
    for (name, method), (dtype, beta, softcap, extra, vocab) in itertools.product(
        methods_for("tp").items(), list(grid)
    ):
        if method.availability("cpu") is not None:  # cce: CUDA only
            continue
        kw = dict(dtype=dtype, beta=beta, softcap=softcap, vocab=vocab, **extra)
        start, stop = shard_ranges(vocab, world)[0]
        reason = method.unsupported_at(_case(**kw), Shard(0, world, start, stop, vocab))
        jobs.append(Job(name, kw, "pass" if reason is None else "unsupported", reason or ""))
    return _only_installed(jobs)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_grid(world: int) -> None:
    _spawn(world, _grid(world) + _only_installed(FOUR_RANKS if world == 4 else []))


def test_registry_and_availability() -> None:
    """CCE says why it cannot run; the declared reasons carry the library's own limit
    (that the registry imports no wrapped library is checked by ``_launch``)."""
    from perfsuite.baselines import cce as cce_module
    from perfsuite.plan.registry import methods_for

    methods = methods_for("tp")
    assert list(methods) == ["eager", "torch-parallel", "ours", "megatron", "liger", "cce"]
    cce = methods["cce"]
    if _have("cut_cross_entropy"):
        assert cce.availability("cpu") == cce_module.CPU_REASON
        if cce_module._vp_check("cuda") is not None:
            assert "has no VocabParallelOptions" in cce.availability("cuda")
    assert methods["ours"].availability("cpu") is None
    assert methods["eager"].caps.class_weights and not methods["torch-parallel"].caps.z_loss
    assert methods["liger"].caps.triton and not methods["ours"].caps.triton
    # The declared reasons carry the library's own limit.
    shard = Shard(0, 2, 0, 150, EVEN)
    assert "NVIDIA/Megatron-LM#737" in methods["megatron"].unsupported_at(
        _case(vocab=EVEN, beta=0.1), shard
    )
    assert methods["cce"].unsupported_at(_case(beta=0.1), shard).startswith("no label smoothing")
