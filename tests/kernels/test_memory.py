"""The kernel's peak memory is the design's formula, read by the CPU tensor meter: above
the inputs, the floor (dE + dC) + N·D·4 (the fp32 dE) + the slice workspace the budget
bounds + O(N + V + D) and row-chunk temporaries; the tile ablation's per-tile LSEs instead
of slices."""

from __future__ import annotations

import pytest
import torch
import triton
from helpers import lce, make_inputs

from perfsuite.kernels.configs import pinned_config
from perfsuite.kernels.slices import WIDTH_GRAIN, bytes_per_column, slice_width
from perfsuite.measure.memory import measure_cpu_peak
from perfsuite.plan.memory_model import floor_bytes

# Small for the interpreter, yet the O(N + V + D) allowance (``_small``) stays below
# the N·D·4 dE accumulator, as at 512 × 4096 × 256.
N, V, D = 256, 2048, 256


def _peak(device: str, beta: float, softcap: float | None, warm: bool = True, **options) -> int:
    e, c, t = make_inputs(N, V, D, torch.bfloat16, device)
    e.requires_grad_()
    c.requires_grad_()

    def step():
        lce(e, c, t, label_smoothing=beta, softcap=softcap, **options).backward()

    if warm:  # compile-time and first-call allocations out of the way
        step()
        e.grad = c.grad = None
    return measure_cpu_peak(step).delta


def _small() -> int:
    small = (N + V + D) * 64 + N * D * 10 // 16
    assert small < N * D * 4  # else a stray N×D fp32 buffer could hide in the allowance
    return small


@pytest.mark.parametrize("engine", ["triton", "torch", "cublas"])
@pytest.mark.parametrize(("beta", "softcap"), [(0.0, None), (0.1, 30.0)])
def test_slices_peak_is_floor_plus_de_plus_budget(device, engine, beta, softcap):
    """Each engine with its own bytes per column."""
    if device != "cpu":
        pytest.skip("the CPU tensor meter; CUDA peaks are measured by perfsuite run")
    floor = floor_bytes("fwd+bwd", N, V, D, "bf16")
    cap = softcap is not None
    per = bytes_per_column(N, D, torch.bfloat16, torch.device(device), engine, cap)
    budget = 4 * WIDTH_GRAIN * per
    assert V // slice_width(V, per, budget) == 4  # four slices of the vocabulary
    peak = _peak(device, beta, softcap, engine=engine, memory_budget=budget)
    assert floor + N * D * 4 <= peak <= floor + N * D * 4 + budget + _small(), (peak, floor)
    # A budget holding the whole vocabulary costs more: the budget is what bounds it.
    # Same path as the call above, so already warm (its first-call allocations are gone).
    whole = _peak(device, beta, softcap, warm=False, engine=engine, memory_budget=V * per)
    assert whole > peak + budget // 2, (whole, peak)


@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_tiles_peak_is_the_formula(device, beta):
    if device != "cpu":
        pytest.skip("the CPU tensor meter; CUDA peaks are measured by perfsuite run")
    peak = _peak(device, beta, None, tiles=True, filter_eps="auto")
    floor = floor_bytes("fwd+bwd", N, V, D, "bf16")
    block_v = pinned_config("forward", torch.bfloat16, torch.device(device), (N, V, D)).block_v
    designed = floor + N * D * 4 + N * triton.cdiv(V, block_v) * 2
    assert floor + N * D * 4 <= peak <= designed + _small(), (peak, designed)


def test_workspace_is_freed_before_de_is_cast():
    """dE's cast to the dtype comes after the slice workspace is freed: held through it, the
    workspace and both dE copies were the peak (on the H200, floor + 72 + 64 MiB). The
    torch engine at N ≫ the width keeps the fp32 G and its rounded copy (N·W·6 B) to the end
    of the loop, more than its loop's own transients."""
    n, v, d = 1024, 512, 512
    e, c, t = make_inputs(n, v, d, torch.bfloat16, "cpu")
    e.requires_grad_()
    c.requires_grad_()
    per = bytes_per_column(n, d, torch.bfloat16, torch.device("cpu"), "torch", False)
    width = slice_width(v, per, WIDTH_GRAIN * per)
    assert width == WIDTH_GRAIN

    def step():
        lce(e, c, t, engine="torch", memory_budget=WIDTH_GRAIN * per).backward()

    step()
    e.grad = c.grad = None
    over = measure_cpu_peak(step).delta - floor_bytes("fwd+bwd", n, v, d, "bf16") - n * d * 4
    assert 0 <= over < n * width * 6, over
