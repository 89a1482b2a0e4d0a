"""Class weights, z-loss and the returned LSE (issue 22) against the fp32 reference.

The reference is ``F.cross_entropy(weight=...)`` on materialised logits plus
``z_loss·lse²`` per valid row; the tolerance rule is the one every kernel test uses
(helpers.check). Both engines, every reduction, β, softcap and dtype; the engine is
spread over the other axes so that each of its values meets every value of every other.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers import DTYPES, check, full_loss, grads, lce, make_inputs

from perfsuite.kernels import LinearCrossEntropy, linear_cross_entropy

ENGINES = ["triton", "torch"]


def _weights(v: int, device: str, zeros: bool = True) -> torch.Tensor:
    w = torch.rand(v, device=device) * 2
    if zeros:
        w[::7] = 0.0  # some classes switched off, as users do for padding ids
    return w


@pytest.mark.parametrize(
    ("dtype", "beta", "softcap", "engine"),
    [
        (dtype, beta, cap, ENGINES[(i + j + k) % 2])
        for (i, dtype), (j, beta), (k, cap) in itertools.product(
            enumerate(DTYPES), enumerate([0.0, 0.1]), enumerate([None, 20.0])
        )
    ],
)
def test_weight_and_z_loss_with_beta_softcap_dtype(device, dtype, beta, softcap, engine):
    e, c, t = make_inputs(29, 50, 40, DTYPES[dtype], device)  # two slices: 32, then 18
    check(
        e, c, t, beta=beta, softcap=softcap, weight=_weights(50, device), z_loss=1e-2,
        engine=engine,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("reduction", "terms", "engine"),
    [
        (reduction, terms, ENGINES[(i + j) % 2])
        for (i, reduction), (j, terms) in itertools.product(
            enumerate(["mean", "sum", "none"]), enumerate(["weight", "z", "both"])
        )
    ],
)
def test_each_term_through_each_reduction(device, reduction, terms, engine):
    e, c, t = make_inputs(29, 50, 40, torch.float32, device)
    weight = _weights(50, device) if terms in ("weight", "both") else None
    z_loss = 1e-2 if terms in ("z", "both") else 0.0
    check(
        e, c, t, beta=0.1, softcap=20.0, reduction=reduction, weight=weight, z_loss=z_loss,
        engine=engine,
    )  # fmt: skip


@pytest.mark.parametrize("engine", ENGINES)
def test_several_slices_and_beta_one(device, engine):
    """A memory budget of a few columns: many slices, each with its own weights; β = 1."""
    e, c, t = make_inputs(40, 700, 32, torch.float32, device)
    for beta in (0.3, 1.0):
        check(
            e, c, t, beta=beta, softcap=15.0, weight=_weights(700, device), z_loss=3e-3,
            engine=engine, memory_budget=40 * 64 * 4,
        )  # fmt: skip


@pytest.mark.parametrize("ignore", ["none", "all", "prefix"])
def test_ignore_patterns_and_fused(device, ignore):
    e, c, t = make_inputs(50, 150, 24, torch.float32, device, ignore=ignore)
    for impl in ("split", "fused"):
        check(e, c, t, beta=0.1, weight=_weights(150, device), z_loss=1e-2, impl=impl)


def test_mean_with_every_target_weight_zero_is_zero(device):
    """Torch divides by Σ w[y] = 0 (NaN); ours gives 0 and zero gradients, no sync."""
    e, c, t = make_inputs(20, 64, 16, torch.float32, device, ignore="none")
    weight = torch.ones(64, device=device)
    weight[t] = 0.0
    loss, de, _ = grads(e, c, t, weight=weight)
    assert loss.item() == 0.0 and not de.any()


def test_uniform_weights_equal_no_weights(device):
    e, c, t = make_inputs(33, 120, 24, torch.float32, device)
    plain = linear_cross_entropy(e, c, t, label_smoothing=0.1)
    ones = linear_cross_entropy(e, c, t, label_smoothing=0.1, weight=torch.ones(120))
    torch.testing.assert_close(plain, ones, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("engine", ENGINES)
def test_returned_lse_values_and_gradient(device, engine):
    """The LSE is the fp32 reference's, shaped like targets, and its gradient (a user's
    own z-loss on it) flows back exactly."""
    e, c, t = make_inputs(24, 90, 16, torch.float32, device)
    e3, t3 = e.reshape(4, 6, 16), t.reshape(4, 6)
    ours_e, ref_e = e3.clone().requires_grad_(), e3.clone().requires_grad_()
    loss, lse = linear_cross_entropy(
        ours_e, c, t3, softcap=10.0, return_lse=True, engine=engine, label_smoothing=0.1
    )
    assert lse.shape == t3.shape and lse.dtype == torch.float32
    (loss + 0.1 * lse.square().mean()).backward()
    logits = 10.0 * torch.tanh((ref_e.reshape(-1, 16) @ c.T) / 10.0)
    ref_lse = torch.logsumexp(logits, -1).reshape(4, 6)
    ref = torch.nn.functional.cross_entropy(logits, t, label_smoothing=0.1)
    (ref + 0.1 * ref_lse.square().mean()).backward()
    torch.testing.assert_close(lse, ref_lse.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours_e.grad, ref_e.grad, rtol=2e-4, atol=2e-6)


def test_per_token_weights_through_reduction_none(device):
    """Per-token weighting is `reduction="none"` and a weighted sum; a batch whose every
    token is masked gives loss 0 and zero (not NaN) gradients on every input."""
    e, c, t = make_inputs(32, 80, 16, torch.float32, device, ignore="none")
    token_w = torch.rand(32, device=device)
    for mask in (token_w, torch.zeros(32, device=device)):
        e1, c1 = e.clone().requires_grad_(), c.clone().requires_grad_()
        rows = linear_cross_entropy(e1, c1, t, reduction="none", label_smoothing=0.1)
        loss = (rows * mask).sum() / mask.sum().clamp(min=1)
        loss.backward()
        e2, c2 = e.clone().requires_grad_(), c.clone().requires_grad_()
        ref_rows = full_loss(e2, c2, t, 0.1, None, "none")
        ((ref_rows * mask).sum() / mask.sum().clamp(min=1)).backward()
        torch.testing.assert_close(loss, ref_rows.new_tensor(loss.item()), rtol=1e-5, atol=0)
        torch.testing.assert_close(e1.grad, e2.grad, rtol=2e-4, atol=2e-6)
        torch.testing.assert_close(c1.grad, c2.grad, rtol=2e-4, atol=2e-6)
        if not mask.any():
            assert loss.item() == 0.0 and not e1.grad.any() and not c1.grad.any()


def test_module_keeps_weights_as_a_buffer(device):
    weight = _weights(64, device)
    module = LinearCrossEntropy(weight=weight, z_loss=1e-3, label_smoothing=0.1, reduction="sum")
    assert "weight" in module.state_dict() and "label_smoothing=0.1" in repr(module)
    e, c, t = make_inputs(16, 64, 8, torch.float32, device)
    expected = full_loss(e, c, t, 0.1, None, "sum", weight, 1e-3)
    torch.testing.assert_close(module(e, c, t), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        (dict(label_smoothing=1.5), ValueError, "label_smoothing must be a float in [0, 1]"),
        (dict(label_smoothing=-0.1), ValueError, "label_smoothing must be a float in [0, 1]"),
        (dict(reduction="avg"), ValueError, "unknown reduction"),
        (dict(impl="magic"), ValueError, "unknown impl"),
        (dict(engine="cuBLAS"), ValueError, "unknown engine"),
        (dict(softcap=-1.0), ValueError, "softcap must be None or a positive float"),
        (dict(filter_eps="high"), ValueError, "filter_eps must be"),  # the tile ablation's
        (dict(weight=torch.ones(5)), ValueError, "weight must have shape (64,)"),
        (dict(weight=torch.ones(64, 1)), ValueError, "weight must have shape"),
        (dict(weight=-torch.ones(64)), ValueError, "negative class weight"),
        (dict(weight=torch.ones(64, dtype=torch.long)), TypeError, "float tensor"),
        (dict(z_loss=-1e-4), ValueError, "z_loss must be a finite float >= 0"),
        (dict(z_loss="big"), TypeError, "z_loss"),
        (dict(return_lse=True, impl="fused"), ValueError, "return_lse needs impl='split'"),
        (dict(z_loss=1e-4, filter_eps="auto"), ValueError, "need the slice backward"),
        (dict(weight=torch.ones(64), tiles=True), ValueError, "need the slice backward"),
    ],
)
def test_bad_options_get_one_line_errors(device, kwargs, error, words):
    e, c, t = make_inputs(8, 64, 8, torch.float32, device)
    kwargs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with pytest.raises(error) as info:
        lce(e, c, t, **kwargs)
    message = str(info.value)
    assert words in message and "\n" not in message
