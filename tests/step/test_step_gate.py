"""The step's correctness gate, in-process on the smoke model: eager passes against its
own references, a gradient off by a little in one parameter fails and is named, a
missing gradient fails, and the bounds follow the rule of ``perfsuite.run.correctness``."""

from __future__ import annotations

import pytest
import torch

from perfsuite.step.gate import one_pass, reference, step_verdict
from perfsuite.step.model import build_model, eager_loss, make_batch, reference_loss
from perfsuite.step.presets import Size, get_preset

SIZE = Size(layers=1, seq=16, batch=1)


@pytest.fixture(scope="module")
def smoke():
    preset = get_preset("smoke")
    return preset, make_batch(preset, SIZE, 0, "cpu")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_eager_passes_and_a_perturbed_gradient_fails(smoke, dtype):
    preset, ids = smoke
    model = build_model(preset, SIZE, 0, "cpu")
    ref = reference(model, ids, 0.1, dtype)
    assert next(model.parameters()).dtype == {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    loss, grads = one_pass(model, ids, lambda x: eager_loss(model, x, 0.1))
    verdict = step_verdict(loss, grads, ref)
    assert verdict.passed, verdict.explain()
    name = "model.layers.0.mlp.down_proj.weight"
    bad = {**grads, name: grads[name] + 50 * ref.bounds[name]}
    verdict = step_verdict(loss, bad, ref)
    assert not verdict.passed and name in verdict.explain()
    assert verdict.errors["grad_e"] > verdict.bounds["grad_e"]
    missing = {k: v for k, v in grads.items() if k != ref.head}
    assert "no gradient for lm_head.weight" in step_verdict(loss, missing, ref).explain()


def test_fp32_bounds_come_from_torch_own_fp64_error(smoke):
    preset, ids = smoke
    ref = reference(build_model(preset, SIZE, 0, "cpu"), ids, 0.0, "fp32")
    scale = float(ref.grads[ref.head].abs().max())
    # 2 x (fp32 vs fp64) + 1e-5 x scale: above the slack alone, far below the scale
    assert 1e-5 * scale < ref.bounds[ref.head] < 1e-3 * scale
    assert ref.head == "lm_head.weight" and set(ref.bounds) == {*ref.grads, "loss"}


def test_eager_at_beta_0_is_the_model_own_loss(smoke):
    preset, ids = smoke
    model = build_model(preset, SIZE, 0, "cpu")
    own = model(input_ids=ids, labels=ids).loss
    assert torch.equal(own, reference_loss(model, ids, 0.0))
    logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), -1)
    nll = -logp.gather(1, ids[0, 1:, None]).mean()
    expected = 0.9 * nll - 0.1 * logp.mean(-1).mean()  # (1 - β) nll + β uniform
    assert torch.allclose(eager_loss(model, ids, 0.1).double(), expected, rtol=1e-6)
