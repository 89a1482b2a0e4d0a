"""Workloads: a synthetic trained-LM-like softmax, and dumps of real hidden states."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import save_file

from perfsuite.method import Case
from perfsuite.plan.workloads import (
    WorkloadError,
    file_info,
    file_shape,
    mean_entropy,
    parse_workload,
    read_dump,
    synthetic_inputs,
    workload_label,
    zipf_log_prior,
)
from perfsuite.run.inputs import make_inputs


@pytest.mark.parametrize(
    ("target", "softcap"), [(0.5, None), (2.0, None), (2.0, 30.0), (5.5, None), (6.0, 30.0)]
)
def test_synthetic_entropy_hits_its_target(target, softcap):
    e, c, targets, info = synthetic_inputs(128, 500, 32, entropy=target, softcap=softcap)
    assert mean_entropy(e, c, softcap) == pytest.approx(target, abs=0.05)
    assert e.shape == (128, 32) and c.shape == (500, 32) and targets.shape == (128,)
    assert 0 <= int(targets.min()) and int(targets.max()) < 500
    # Below the prior's own entropy the softmax is sharpened; above it, the prior is weakened.
    assert (info["sharpness"] > 0) == (target < info["prior_entropy"])


def test_predictions_and_targets_follow_the_zipf_prior():
    vocab = 1000
    e, c, targets, info = synthetic_inputs(1024, vocab, 32, entropy=1.5, zipf=1.0, seed=3)
    head = info["log_prior"].argsort(descending=True)[: vocab // 10]  # the 10% most frequent
    in_head = torch.isin(targets, head).float().mean().item()
    argmax_in_head = torch.isin((e @ c.T).argmax(1), head).float().mean().item()
    # Zipf(1) over 1000 ids puts ~70% of the mass on the top 10%; uniform would be 10%.
    assert in_head > 0.5 and argmax_in_head > 0.5
    _, _, flat, _ = synthetic_inputs(1024, vocab, 32, entropy=1.5, zipf=0.0, seed=3)
    assert torch.isin(flat, head).float().mean().item() < 0.25
    prior = zipf_log_prior(vocab, 1.0, torch.Generator().manual_seed(0)).exp()
    ranked = prior.sort(descending=True).values
    assert prior.sum().item() == pytest.approx(1.0, abs=1e-5)
    assert (ranked[0] / ranked[9]).item() == pytest.approx(10.0, rel=1e-3)  # p ∝ 1/rank


def test_make_inputs_says_its_workload_and_entropy():
    inputs = make_inputs(Case(64, 500, 32, "fp32"), 0)  # random: nearly flat
    assert inputs.workload == "random"
    assert math.log(500) - 1 < inputs.entropy < math.log(500)
    spec = parse_workload(None, entropy=1.0)
    inputs = make_inputs(Case(64, 500, 32, "bf16", softcap=30.0), 0, spec)
    assert inputs.e.dtype == torch.bfloat16 and inputs.e.requires_grad
    assert inputs.workload == "synthetic(H=1,zipf=1)" == workload_label(spec)
    assert inputs.entropy == pytest.approx(1.0, abs=0.1)  # measured after the cast to bf16


def test_parse_workload():
    assert parse_workload(None) is None and parse_workload("random") is None
    assert parse_workload("synthetic") == {"kind": "synthetic", "entropy": 2.0, "zipf": 1.0}
    assert parse_workload(None, zipf=1.2)["zipf"] == 1.2
    for bad, kwargs in (("random", {"entropy": 1.0}), ("nonsense", {}), ("x.safetensors", {})):
        with pytest.raises(WorkloadError):
            parse_workload(bad, **kwargs)
    with pytest.raises(WorkloadError, match="outside"):
        synthetic_inputs(8, 100, 8, entropy=10.0)


def _dump(n=24, v=100, d=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return {
        "e": torch.randn(n, d, generator=gen).bfloat16(),
        "c": torch.randn(v, d, generator=gen).bfloat16(),
        "targets": torch.randint(0, v, (n,), generator=gen),
    }


def test_loads_a_safetensors_dump(tmp_path):
    path = tmp_path / "gemma-states.safetensors"
    tensors = _dump()
    tensors["targets"][3] = -100  # ignored tokens are allowed
    save_file(tensors, str(path), metadata={"softcap": "30"})
    spec = parse_workload(str(path))
    assert spec == {"kind": "file", "path": str(path.resolve())}
    info = file_info(spec)
    assert (info["tokens"], info["vocab"], info["hidden"], info["dtype"]) == (24, 100, 16, "bf16")
    assert info["softcap"] == 30.0
    inputs = make_inputs(Case(16, 100, 16, "bf16", softcap=30.0), 0, spec)  # first 16 rows
    assert torch.equal(inputs.e.detach(), tensors["e"][:16])
    assert torch.equal(inputs.targets, tensors["targets"][:16])
    assert inputs.workload == "file:gemma-states.safetensors" and inputs.entropy > 0
    with pytest.raises(WorkloadError, match="must match"):
        make_inputs(Case(16, 99, 16, "bf16"), 0, spec)
    shape = file_shape(spec, tokens=16)
    assert (shape.tokens, shape.vocab, shape.hidden, shape.softcap) == (16, 100, 16, 30.0)
    assert file_shape(spec).name == "gemma-states" and file_shape(spec).tokens == 24
    with pytest.raises(WorkloadError, match="holds N=24"):
        file_shape(spec, tokens=25)
    with pytest.raises(WorkloadError, match="fixes V and D"):
        file_shape(spec, 16, vocab=100)


def test_loads_a_torch_dump_with_a_softcap_tensor_and_refuses_junk(tmp_path):
    path = tmp_path / "dump.pt"
    torch.save({**_dump(), "softcap": torch.tensor(15.0)}, path)
    dump = read_dump(path)
    assert dump["softcap"] == 15.0 and dump["targets"].dtype == torch.long
    path.write_bytes(b"not a pickle")
    with pytest.raises(WorkloadError, match="not a readable torch file"):
        read_dump(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.pop("c"), "missing tensor\\(s\\) c"),
        (lambda t: t.pop("targets"), "missing tensor\\(s\\) targets"),
        (lambda t: t.update(c=torch.randn(100, 8)), "hidden sizes disagree"),
        (lambda t: t.update(targets=torch.zeros(5, dtype=torch.long)), "one id per row"),
        (lambda t: t.update(targets=torch.full((24,), 100)), "must lie in \\[0, V=100\\)"),
        (lambda t: t.update(targets=torch.zeros(24)), "integer token ids"),
        (lambda t: t.update(e=torch.randn(24, 16, 1)), "must be 2-D"),
    ],
)
def test_bad_dumps_are_refused_clearly(tmp_path, change, message):
    tensors = _dump()
    change(tensors)
    path = tmp_path / "bad.safetensors"
    save_file(tensors, str(path))
    with pytest.raises(WorkloadError, match=message):
        parse_workload(str(path))


@pytest.mark.integration
def test_rows_record_the_workload_and_its_entropy():
    from perfsuite.plan.plan import build_plan
    from perfsuite.plan.shapes import Shape
    from perfsuite.run.runner import run_plan

    workload = parse_workload("synthetic", entropy=1.5)
    plan = build_plan(shapes=[Shape("tiny", 32, 300, 16, dtype="fp32")], methods="eager",
                      betas="0", phases="fwd+bwd", device="cpu", samples=2, warmup=1,
                      workload=workload)  # fmt: skip
    (row,) = run_plan(plan)["rows"]
    assert row["status"] == "ok", row["reason"]
    assert row["workload"] == "synthetic(H=1.5,zipf=1)"
    assert row["entropy"] == pytest.approx(1.5, abs=0.05)
