"""The kernel's pass/fail checks at Gemma2-2B's full size, on a GPU only: what only full
size shows is concurrency (thousands of CTAs, hardware atomics, 63 vocab slices).
`.ci/gpu-run 1` runs this file first, before anything is timed.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from helpers import bits, check, grads, lce, make_inputs

from perfsuite.kernels.common import locked_add

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

N, V, D = 8192, 256_000, 2304  # Gemma2-2B, bf16, its softcap
SOFTCAP = 30.0
# The atomic-tile ablation (kernels/ablations.py), as the ours-tiles* methods run it.
TILE_SETTINGS = {
    "ours-tiles": {"tiles": True},
    "ours-tiles-list": {"filter_eps": "auto"},
    "ours-tiles-sort": {"filter_eps": "auto", "tile_list": False},
    "tiles-accum-fp32": {"tiles": True, "accum_fp32": True},
}


@pytest.fixture(scope="module")
def gemma() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return make_inputs(N, V, D, torch.bfloat16, "cuda")


@triton.jit
def _lock_stress(X, Lock, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ones = tl.full((BLOCK,), 1.0, dtype=tl.float16)
    locked_add(X + offs, ones, offs < BLOCK, Lock, False, True)


def test_lock_admits_one_cta_at_a_time() -> None:
    """2,048 CTAs each add 1 into one fp16 tile under one lock: a lost update shows."""
    programs = 2048  # exact in fp16 (integers up to 2^11)
    x = torch.zeros(64, device="cuda", dtype=torch.float16)
    lock = torch.zeros(1, device="cuda", dtype=torch.int32)
    _lock_stress[(programs,)](x, lock, BLOCK=64)
    torch.cuda.synchronize()
    assert (x == programs).all(), (x.min().item(), x.max().item())
    assert lock.item() == 0


@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_slice_backward_exact_and_bit_identical_at_gemma2_2b(gemma, beta: float) -> None:
    """Loss, dE and dC within torch's own bf16 error (plus half an ulp) of fp32; no atomics
    in the slice backward, so two runs agree in every bit."""
    check(*gemma, beta=beta, softcap=SOFTCAP)
    first = grads(*gemma, label_smoothing=beta, softcap=SOFTCAP)
    second = grads(*gemma, label_smoothing=beta, softcap=SOFTCAP)
    for name, a, b in zip(("loss", "dE", "dC"), first, second, strict=True):
        differ = int((bits(a) != bits(b)).sum())
        assert differ == 0, f"{name}: {differ} of {a.numel()} elements differ"


@pytest.mark.parametrize("setting", list(TILE_SETTINGS))
def test_tile_ablation_has_no_race_at_gemma2_2b(gemma, setting: str) -> None:
    """Two runs of a tile backward differ only by the order of its atomic adds: a few
    bf16 ulps at the gradient's scale. More than 8 is a lost or doubled update."""
    options = dict(label_smoothing=0.1, softcap=SOFTCAP, **TILE_SETTINGS[setting])
    first = grads(*gemma, **options)
    second = grads(*gemma, **options)
    for name, a, b in zip(("dE", "dC"), first[1:], second[1:], strict=True):
        scale = a.float().abs().max().item()
        drift = (a.float() - b.float()).abs().max().item()
        assert drift <= 8 * 2**-8 * scale, f"{name}: drift {drift:.3g} at scale {scale:.3g}"


@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_op_forward_and_backward_capture_in_a_cuda_graph(gemma, beta: float) -> None:
    """No host copy or sync inside the op (issue 44): fwd+bwd captures in one CUDA graph,
    and a replay gives eager's loss and gradients bit for bit. The host-side proof that
    nothing in the op syncs is tests/kernels/test_no_host_sync.py; this is the device's."""
    e, c, t = (x.detach() for x in gemma)
    e.requires_grad_()
    c.requires_grad_()

    def step() -> torch.Tensor:
        e.grad = c.grad = None
        loss = lce(e, c, t, label_smoothing=beta, softcap=SOFTCAP)
        loss.backward()
        return loss.detach()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: Triton's compilation, cuBLAS's handles
        eager = (step(), e.grad.clone(), c.grad.clone())
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    graph.replay()
    torch.cuda.synchronize()
    replayed = (captured, e.grad, c.grad)
    for name, a, b in zip(("loss", "dE", "dC"), eager, replayed, strict=True):
        differ = int((bits(a) != bits(b)).sum())
        assert differ == 0, f"{name}: {differ} of {a.numel()} elements differ"
