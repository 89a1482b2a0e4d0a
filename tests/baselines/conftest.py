"""Shared set-up for the baseline adapters' tests.

Without CUDA, Triton kernels (Liger's) can only run under the interpreter, and
``@triton.jit`` reads ``TRITON_INTERPRET`` when a kernel is defined, i.e. when
liger_kernel is imported: so it is set here, at collection, before any test
imports it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from perfsuite.baselines.torch_methods import case_loss, eager_loss  # noqa: E402
from perfsuite.method import Case, SimpleMethod  # noqa: E402
from perfsuite.run.correctness import (  # noqa: E402
    QUANTITIES,
    distance,
    reference_outcome,
    run_once,
)
from perfsuite.run.inputs import make_inputs  # noqa: E402

# Relative slack (times the reference's largest magnitude) on top of torch's
# own error in the same dtype: half an ulp at the top of the largest binade
# for the low-precision dtypes (errors there come in whole ulps).
SLACK = {"fp32": 1e-5, "bf16": 2.0**-8, "fp16": 2.0**-11}
CUDA_FP32_SLACK = 1e-4


def matches_reference(method: SimpleMethod, case: Case, factor: float = 2.0) -> None:
    """Loss and both gradients of ``method`` against the fp32 reference, on the suite's
    inputs with every 7th target ignored (exercises ignore_index).

    CCE's tolerance: a method may be as far from the fp32 reference as torch in
    the same dtype (eager logits in that dtype; TF32 matmuls for fp32 on CUDA),
    ``factor`` times over, plus a small slack relative to the reference's
    largest magnitude. The default 2 is the suite's own gate
    (perfsuite.run.correctness): every token-chunked method sums grad_c over its
    chunks in the input dtype (torchtune's autograd across the 8 projections,
    Liger's accumulator, CCE's lock-add), one bf16 rounding per chunk, which
    lands between 1x and 2x torch's own bf16 error at the tests' shapes.
    """
    inputs = make_inputs(case, seed=0)
    inputs.targets[::7] = case.ignore_index
    reference = reference_outcome(case, inputs)
    on_cuda = case.device == "cuda"
    if case.dtype == "fp32" and not on_cuda:
        torch_same = reference  # eager fp32 on CPU is the reference
    else:
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            torch_same = run_once(functools.partial(case_loss, eager_loss, case), inputs)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous
    result = run_once(method.prepare(case, inputs.c), inputs)

    slack = CUDA_FP32_SLACK if (on_cuda and case.dtype == "fp32") else SLACK[case.dtype]
    errors, bounds = {}, {}
    for name in QUANTITIES:
        r, t, m = (outcome.get(name) for outcome in (reference, torch_same, result))
        assert torch.isfinite(m).all(), f"{name} has non-finite values"
        errors[name] = distance(m, r)
        bounds[name] = factor * distance(t, r) + slack * max(float(r.abs().max()), 1e-6)
    failed = {q: (errors[q], bounds[q]) for q in errors if not errors[q] <= bounds[q]}
    assert not failed, f"{method.name} {case}: (error, bound) of {failed}"


@pytest.fixture
def check() -> Callable[..., None]:
    return matches_reference
