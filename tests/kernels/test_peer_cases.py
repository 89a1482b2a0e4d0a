"""The peers' own test setups pointed at our API, with default settings: CCE's backward
grid (its recipe; every element's error vs fp32 at most torch-bf16's + 1e-2) and Liger's
correctness check (uniform weights: a peaked softmax). Larger shapes on CUDA only.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from perfsuite.baselines.torch_methods import softcapped
from perfsuite.kernels import linear_cross_entropy

CUDA = torch.cuda.is_available()
CCE_SHAPES = [(256, 512, 128), (252, 507, 128), (252, 507, 123)] if CUDA else [(252, 507, 123)]


def _torch_loss(e, c, t, softcap, reduction, beta):
    logits = softcapped(e @ c.T, softcap)
    return F.cross_entropy(logits.float(), t, reduction=reduction, label_smoothing=beta)


def _grads(fn, e, c, t, reduction):
    e = e.detach().clone().requires_grad_()
    c = c.detach().clone().requires_grad_()
    loss = fn(e, c, t)
    if reduction == "sum":  # as CCE's tests: scale sums to a mean's size
        loss = loss / (t != -100).sum()
    loss.float().mean().backward()
    return e.grad, c.grad


@pytest.mark.parametrize(
    ("shape", "softcap", "invalids", "reduction", "shift", "beta"),
    list(
        itertools.product(
            CCE_SHAPES, [None, 20.0], [False, True], ["none", "mean", "sum"], [False, True],
            [0.0, 0.1],
        )
    ),
)  # fmt: skip
def test_cce_backward_grid(device, shape, softcap, invalids, reduction, shift, beta):
    # On CPU the grid runs the native engine (the interpreter takes ~1 s a case); the
    # Triton kernels meet this recipe in test_cce_cases_at_gpu_sized_tiles below and in
    # test_values_and_grads' full grid, and on CUDA here.
    engine = "torch" if device == "cpu" else "auto"
    _cce_case(device, shape, softcap, invalids, reduction, shift, beta, engine)


def _cce_case(device, shape, softcap, invalids, reduction, shift, beta, engine="auto"):
    n, v, d = shape
    gen = torch.Generator(device="cpu").manual_seed(0)
    e = (torch.randn(n, d, generator=gen) / d**0.5).to(device, torch.bfloat16)
    c = torch.randn(v, d, generator=gen).to(device, torch.bfloat16)
    c[: min(n, v) // 2] = e[: min(n, v) // 2]  # CCE's recipe: some rows predict themselves
    t = torch.randint(0, v, (n,), generator=gen).to(device)
    if invalids:
        t[torch.randperm(n, generator=gen)[: n // 5].to(device)] = -100
    e, t = e.view(4, -1, d), t.view(4, -1)
    if shift:  # next-token alignment, as CCE's shift=True
        e, t = e[:, :-1], t[:, 1:]

    def ours(e, c, t):
        return linear_cross_entropy(
            e, c, t, softcap=softcap, reduction=reduction, label_smoothing=beta, engine=engine
        )

    def torch_in(dtype):
        def fn(e, c, t):
            return _torch_loss(
                e.reshape(-1, d).to(dtype), c.to(dtype), t.reshape(-1), softcap, reduction, beta
            )

        return fn

    gt = _grads(torch_in(torch.float32), e, c, t, reduction)
    ref = _grads(torch_in(torch.bfloat16), e, c, t, reduction)
    got = _grads(ours, e, c, t, reduction)
    for name, g, r, o in zip(("dE", "dC"), gt, ref, got, strict=True):
        expected = (g.float() - r.float()).abs()
        error = (g.float() - o.float()).abs()
        excess = (error - expected - 1e-2).max().item()
        assert excess <= 0, f"{name}: error exceeds torch-bf16's + 1e-2 by {excess:.3g}"


LIGER_SHAPES = [(2, 4, 512, 512)] + (
    [(8, 2048, 4096, 32000), (4, 423, 8192, 32000)] if CUDA else []
)


@pytest.mark.parametrize(("b", "t", "h", "v"), LIGER_SHAPES)
@pytest.mark.parametrize(
    ("dtype", "atol", "rtol"), [(torch.bfloat16, 5e-3, 5e-2), (torch.float32, 1e-5, 5e-4)]
)
def test_liger_correctness(device, b, t, h, v, dtype, atol, rtol):
    gen = torch.Generator(device="cpu").manual_seed(0)
    weight = torch.rand(v, h, generator=gen).to(device, dtype)
    x = torch.randn(b * t, h, generator=gen).to(device, dtype)
    target = torch.randint(0, v, (b * t,), generator=gen).to(device)

    def run(fn):
        xi = x.detach().clone().requires_grad_()
        w = weight.detach().clone().requires_grad_()
        loss = fn(xi, w)
        loss.backward()
        return loss.detach(), xi.grad, w.grad

    expected = run(lambda xi, w: F.cross_entropy(xi @ w.T, target))
    got = run(lambda xi, w: linear_cross_entropy(xi, w, target))
    for name, a, b_ in zip(("loss", "dx", "dW"), got, expected, strict=True):
        torch.testing.assert_close(
            a.to(b_.dtype), b_, atol=atol, rtol=rtol, msg=lambda m, n=name: f"{n}: {m}"
        )


@pytest.mark.parametrize(("softcap", "beta"), [(None, 0.0), (None, 0.1), (20.0, 0.0), (20.0, 0.1)])
def test_cce_cases_at_gpu_sized_tiles(device, softcap, beta):
    """Off-GPU the interpreter's tiles cover the whole problem; GPU-sized tiles make the
    forward and the slice kernel (the default backward) accumulate over many tiles."""
    from perfsuite.kernels.configs import KernelConfig, use_config

    tiles = dict(
        forward=KernelConfig(64, 128, 64, num_warps=4, num_stages=1),
        slices=KernelConfig(64, 64, 64, num_warps=4, num_stages=1),
    )
    with use_config(**tiles):
        _cce_case(device, (252, 507, 123), softcap, True, "mean", True, beta)
