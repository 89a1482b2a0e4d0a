"""The kernel's peak memory is the design's formula, read by the CPU tensor meter.

fwd+bwd above the inputs: the floor (dE + dC in the input dtype) + N·D·4 (dE
accumulates in fp32; dC's target-part sums reuse that block once dE is rounded)
+ N·⌈V/BLOCK_V⌉·2 (the forward's per-tile LSEs for the tile list) + O(N + V + D)
and the launcher's 1/16-of-dE chunk temporaries.
"""

from __future__ import annotations

import pytest
import torch
import triton
from helpers import make_inputs

from perfsuite.kernels import linear_cross_entropy
from perfsuite.kernels.configs import pinned_config
from perfsuite.measure.memory import measure_tensor_peak
from perfsuite.plan.memory_model import floor_bytes


@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_fwd_bwd_peak_is_the_formula(device, beta):
    if device != "cpu":
        pytest.skip("the CPU tensor meter; CUDA peaks are measured by perfsuite run")
    n, v, d = 512, 4096, 256
    e, c, t = make_inputs(n, v, d, torch.bfloat16, device)
    e.requires_grad_()
    c.requires_grad_()

    def step():
        linear_cross_entropy(e, c, t, label_smoothing=beta).backward()

    step()  # compile-time and first-call allocations out of the way
    e.grad = c.grad = None
    peak = measure_tensor_peak(step)
    floor = floor_bytes("fwd+bwd", n, v, d, "bf16")
    block_v = pinned_config("forward", e.dtype, e.device, (n, v, d)).block_v
    designed = floor + n * d * 4 + n * triton.cdiv(v, block_v) * 2
    small = (n + v + d) * 64 + n * d * 10 // 16
    assert floor + n * d * 4 <= peak <= designed + small, (peak, designed)
