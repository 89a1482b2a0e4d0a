"""Reference comparison in the style of CCE's tests.

fp32 is compared tightly with the fp32 reference. In bf16/fp16 an error is
accepted when it is no larger than torch's own error in that dtype (logits
materialised in the dtype) plus half an ulp at the output's largest magnitude.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from perfsuite.baselines.torch_methods import softcapped
from perfsuite.kernels import linear_cross_entropy
from perfsuite.kernels.ablations import tiled_linear_cross_entropy
from perfsuite.kernels.configs import KernelConfig

# The tile ablation's knobs (kernels/ablations.py): off the public signature.
TILE_OPTIONS = {"filter_eps", "sort_vocab", "accum_fp32", "tile_list"}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Small tiles: several row blocks, vocab tiles and D steps on tiny problems.
TILE = KernelConfig(16, 32, 16, num_warps=4, num_stages=1)
SMALL = dict(
    forward=TILE,
    backward=KernelConfig(16, 32, 16, num_warps=4, num_stages=1, block_dd=16),
    slices=TILE,
)


def lce(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor, **options) -> torch.Tensor:
    """Ours: the atomic-tile ablation when ``tiles=True`` or a tile knob is given."""
    tiles = options.pop("tiles", False) or bool(TILE_OPTIONS & options.keys())
    return (tiled_linear_cross_entropy if tiles else linear_cross_entropy)(e, c, t, **options)


def make_inputs(
    n: int, v: int, d: int, dtype: torch.dtype, device: str, ignore: str = "some"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    e = (torch.randn(n, d, device=device) / d**0.25).to(dtype)
    c = (torch.randn(v, d, device=device) / d**0.25).to(dtype)
    targets = torch.randint(0, v, (n,), device=device)
    if ignore == "some":
        targets[::3] = -100
    elif ignore == "all":
        targets[:] = -100
    elif ignore == "prefix":
        targets[: (2 * n) // 3] = -100
    return e, c, targets


def full_loss(e, c, targets, beta, softcap, reduction, weight=None, z_loss=0.0, upcast=True):
    """torch's cross_entropy on materialised logits (fp32 when ``upcast``, else in the
    inputs' dtype), plus ``z_loss·lse²`` per valid row reduced as kernels/terms.py says."""
    logits = e.float() @ c.float().T if upcast else e @ c.T
    logits = softcapped(logits, softcap)
    w = None if weight is None else weight.to(logits.dtype)
    loss = F.cross_entropy(logits, targets, weight=w, label_smoothing=beta, reduction=reduction)
    if not z_loss:
        return loss
    valid = targets != -100
    rows = torch.where(valid, z_loss * torch.logsumexp(logits.float(), -1).square(), 0.0)
    if reduction == "none":
        return loss + rows
    return loss + (rows.sum() / valid.sum() if reduction == "mean" else rows.sum())


def grads(e, c, t, **options) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ours' loss (detached), dE and dC."""
    e = e.detach().clone().requires_grad_()
    c = c.detach().clone().requires_grad_()
    loss = lce(e, c, t, **options)
    loss.backward()
    return loss.detach(), e.grad, c.grad


def bits(x: torch.Tensor) -> torch.Tensor:
    """Bit patterns, so that two NaNs or -0.0 and 0.0 compare as what they are."""
    return x.contiguous().view({2: torch.int16, 4: torch.int32}[x.element_size()])


def _run(fn, e, c, targets, upstream):
    e = e.detach().clone().requires_grad_()
    c = c.detach().clone().requires_grad_()
    loss = fn(e, c, targets)
    (loss.float() * upstream).sum().backward()
    return loss.detach().float(), e.grad, c.grad


def check(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    *,
    beta: float = 0.0,
    softcap: float | None = None,
    reduction: str = "mean",
    weight: torch.Tensor | None = None,
    z_loss: float = 0.0,
    **options,
) -> None:
    """Loss, dE and dC of ours against the fp32 reference (see module doc)."""
    shape = targets.shape if reduction == "none" else ()
    upstream = torch.rand(shape, device=e.device) + 0.5
    terms = {} if weight is None and not z_loss else dict(weight=weight, z_loss=z_loss)
    ours = _run(
        lambda e, c, t: lce(
            e, c, t, label_smoothing=beta, softcap=softcap, reduction=reduction, **terms,
            **options,
        ), e, c, targets, upstream,
    )  # fmt: skip

    def reference(upcast: bool):
        return lambda e, c, t: full_loss(
            e.reshape(-1, e.shape[-1]), c, t.reshape(-1), beta, softcap, reduction,
            weight, z_loss, upcast,
        ).reshape(shape)  # fmt: skip

    ref = _run(reference(True), e, c, targets, upstream)
    if bool((targets == -100).all()) and reduction == "mean":
        assert ours[0].item() == 0.0
        assert not ours[1].any() and not ours[2].any()
        return
    same = ref if e.dtype == torch.float32 else _run(reference(False), e, c, targets, upstream)
    assert_within_rule(e.dtype, ("loss", "dE", "dC"), ours, ref, same)


def assert_within_rule(dtype: torch.dtype, names, ours, ref, same) -> None:
    """Each output against the fp32 reference ``ref``: tight for fp32 inputs, else no worse
    than torch's own output in ``dtype`` (``same``) plus one rounding (module doc)."""
    for name, a, b, s in zip(names, ours, ref, same, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        if dtype == torch.float32:
            torch.testing.assert_close(
                a, b, rtol=2e-4, atol=2e-6, msg=lambda m, n=name: f"{n}: {m}"
            )
            continue
        err = (a.float() - b.float()).abs().max().item()
        torch_err = (s.float() - b.float()).abs().max().item()
        # One rounding in the dtype at the output's scale: ours rounds p·g to the
        # dtype before its matmuls, torch rounds the logits; either is one rounding.
        tol = torch.finfo(dtype).eps / 2 * b.float().abs().max().item() + 1e-6
        assert err <= torch_err + tol, f"{name}: {err:.3g} > torch {torch_err:.3g} + {tol:.3g}"
