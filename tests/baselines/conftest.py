"""Shared set-up for the baseline adapters' tests.

Without CUDA, Triton kernels (Liger's) can only run under the interpreter, and
``@triton.jit`` reads ``TRITON_INTERPRET`` when a kernel is defined, i.e. when
liger_kernel is imported: so it is set here, at collection, before any test
imports it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from perfsuite.baselines.torch_methods import eager_loss, reference_loss  # noqa: E402
from perfsuite.method import Case, LossFn, SimpleMethod  # noqa: E402
from perfsuite.run.inputs import Inputs, make_inputs  # noqa: E402

SMALL = dict(tokens=64, vocab=500, hidden=64)
# Relative slack (times the reference's largest magnitude) on top of torch's
# own error in the same dtype: half an ulp at the top of the largest binade
# for the low-precision dtypes (errors there come in whole ulps).
SLACK = {"fp32": 1e-5, "bf16": 2.0**-8, "fp16": 2.0**-11}
CUDA_FP32_SLACK = 1e-4

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def case_inputs(case: Case, seed: int = 0) -> Inputs:
    """The suite's inputs, with every 7th target ignored (exercises ignore_index)."""
    inputs = make_inputs(case, seed)
    inputs.targets[::7] = case.ignore_index
    return inputs


def _fwd_bwd(fn: LossFn, inputs: Inputs) -> tuple[torch.Tensor, ...]:
    inputs.clear_grads()
    loss = fn(inputs.e, inputs.c, inputs.targets)
    assert loss.dim() == 0, f"loss must be a scalar, got {tuple(loss.shape)}"
    loss.backward()
    assert inputs.e.grad is not None and inputs.c.grad is not None
    out = (loss.detach().float(), inputs.e.grad.float(), inputs.c.grad.float())
    inputs.clear_grads()
    return out


@dataclass
class Report:
    errors: dict[str, float]
    bounds: dict[str, float]

    @property
    def ok(self) -> bool:
        return all(self.errors[k] <= self.bounds[k] for k in self.errors)


def compare(method: SimpleMethod, case: Case, factor: float = 2.0) -> Report:
    """Loss and both gradients of ``method`` against the fp32 reference.

    CCE's tolerance: a method may be as far from the fp32 reference as torch in
    the same dtype (eager logits in that dtype; TF32 matmuls for fp32 on CUDA),
    ``factor`` times over, plus a small slack relative to the reference's
    largest magnitude. The default 2 is the suite's own gate
    (perfsuite.run.correctness): every token-chunked method sums grad_c over its
    chunks in the input dtype (torchtune's autograd across the 8 projections,
    Liger's accumulator, CCE's lock-add), one bf16 rounding per chunk, which
    lands between 1x and 2x torch's own bf16 error at the tests' shapes.
    """
    inputs = case_inputs(case)

    def ref(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return reference_loss(e, c, t, case.beta, case.softcap, case.ignore_index)

    def same(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return eager_loss(e, c, t, case.beta, case.softcap, case.ignore_index)

    reference = _fwd_bwd(ref, inputs)
    on_cuda = case.device == "cuda"
    if case.dtype == "fp32" and not on_cuda:
        torch_same = reference  # eager fp32 on CPU is the reference
    else:
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            torch_same = _fwd_bwd(same, inputs)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous
    result = _fwd_bwd(method.prepare(case, inputs.c), inputs)

    slack = CUDA_FP32_SLACK if (on_cuda and case.dtype == "fp32") else SLACK[case.dtype]
    errors, bounds = {}, {}
    for name, r, t, m in zip(
        ("loss", "grad_e", "grad_c"), reference, torch_same, result, strict=True
    ):
        assert torch.isfinite(m).all(), f"{name} has non-finite values"
        scale = float(r.abs().max())
        errors[name] = float((m - r).abs().max())
        bounds[name] = factor * float((t - r).abs().max()) + slack * max(scale, 1e-6)
    return Report(errors, bounds)


@pytest.fixture
def check() -> Callable[..., Report]:
    def run(method: SimpleMethod, case: Case, factor: float = 2.0) -> Report:
        report = compare(method, case, factor)
        assert report.ok, f"{method.name} {case}: errors {report.errors} > bounds {report.bounds}"
        return report

    return run
