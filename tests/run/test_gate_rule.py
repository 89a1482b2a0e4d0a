"""The correctness gate: eager within its bounds, a wrong loss outside them, inputs on which
the reference itself is undefined refused. Its tolerance is Cut Cross-Entropy's own test
rule, in a form that means the same at every shape (docs/math.md, "The gate's
tolerance"), and CCE fails that rule on the H200.

CCE's tests (apple/ml-cross-entropy, tests/test_cce_loss_forward.py and
test_cce_loss_backward.py) accept an element when ``|gt − x| ≤ |gt − torch_same_dtype| +
error_tol``, ``gt`` the fp32 result and ``error_tol`` an absolute number per dtype: 1e-5
fp32, 1e-3 fp16, 1e-2 bf16 (the backward reuses fp16's and bf16's) at shapes whose
largest per-token loss is about 10. The gate (perfsuite/run/correctness.py) takes the
largest element of each side, doubles torch's error, and makes ``error_tol`` relative to
the quantity's largest magnitude (``SLACK``).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from perfsuite.baselines.torch_methods import case_loss, eager_loss
from perfsuite.method import Case
from perfsuite.run.correctness import (
    QUANTITIES,
    SLACK,
    Outcome,
    UnusableInputs,
    check_reference,
    gate_reference,
    judge,
    reference_outcome,
    run_once,
    tolerances,
)
from perfsuite.run.inputs import make_inputs

# CCE's tests: error_tol per dtype, their shapes (N, V, D) and softcaps.
CCE_ERROR_TOL = {"fp32": 1e-5, "fp16": 1e-3, "bf16": 1e-2}
CCE_SHAPES = [(256, 512, 128), (252, 507, 128), (252, 507, 123)]
CCE_SOFTCAPS = [None, 20.0]
TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}

H200 = Path(__file__).resolve().parents[2] / "reports" / "nvidia-h200" / "raw"


def cce_test_inputs(shape: tuple[int, int, int], dtype: torch.dtype, seed: int = 0):
    """CCE's test inputs (on the CPU): e ~ N(0, 1/D), c ~ N(0, 1), c's first rows = e's."""
    n, v, d = shape
    g = torch.Generator().manual_seed(seed)
    e = (torch.randn(n, d, generator=g) / d**0.5).to(dtype)
    c = torch.randn(v, d, generator=g).to(dtype)
    c[: min(n, v) // 2] = e[: min(n, v) // 2]
    return e.float(), c.float(), torch.randint(0, v, (n,), generator=g)


def fp32_reference(e, c, targets, softcap):
    """CCE's ``gt``: per-token losses and the mean loss's gradients, in fp32."""
    e, c = e.clone().requires_grad_(), c.clone().requires_grad_()
    logits = e @ c.T
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    losses = F.cross_entropy(logits, targets, reduction="none")
    losses.mean().backward()
    return losses.detach(), e.grad, c.grad


def cce_rule(x: torch.Tensor, gt: torch.Tensor, torch_version: torch.Tensor, tol) -> bool:
    """CCE's tests' acceptance, element by element."""
    return bool(((gt - x).abs() <= (gt - torch_version).abs() + tol).all())


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_gates_slack_is_cces_tolerance_relative_to_its_own_losses(dtype):
    """CCE's forward tolerance over the largest loss of its own test inputs is the gate's
    relative slack (1e-2 / ~10 = 1e-3 in bf16): the gate asks what CCE asks, at any scale."""
    for shape in CCE_SHAPES:
        for softcap in CCE_SOFTCAPS:
            losses, _, _ = fp32_reference(*cce_test_inputs(shape, TORCH_DTYPES[dtype]), softcap)
            relative = CCE_ERROR_TOL[dtype] / float(losses.abs().max())
            assert 2 / 3 <= relative / SLACK[dtype] <= 1.5, (shape, softcap, relative)


def test_in_fp32_the_gate_is_no_stricter_than_cce():
    losses, _, _ = fp32_reference(*cce_test_inputs(CCE_SHAPES[0], torch.float32), None)
    assert SLACK["fp32"] >= CCE_ERROR_TOL["fp32"] / float(losses.abs().max())


def test_cces_absolute_tolerance_read_literally_would_not_judge_a_gradient():
    """Why the gate does not take CCE's bf16 1e-2 as an absolute bound on gradients: at
    CCE's own test shape it exceeds every entry of dC, so a zero dC would pass."""
    _, grad_e, grad_c = fp32_reference(*cce_test_inputs(CCE_SHAPES[0], torch.bfloat16), None)
    assert float(grad_c.abs().max()) < CCE_ERROR_TOL["bf16"]
    assert cce_rule(torch.zeros_like(grad_c), grad_c, grad_c, CCE_ERROR_TOL["bf16"])
    # The gate's slack, relative to dC's largest entry, refuses it.
    slack = SLACK["bf16"] * float(grad_c.abs().max())
    assert not cce_rule(torch.zeros_like(grad_c), grad_c, grad_c, slack)


def _outcome(loss, grad_e, grad_c) -> Outcome:
    return Outcome(loss.reshape(()), grad_e, grad_c)


@pytest.mark.parametrize("seed", range(5))
def test_what_cces_rule_accepts_the_gate_accepts_and_what_the_gate_refuses_cce_refuses(seed):
    """The gate is never stricter than CCE's elementwise rule at the gate's own slack: its
    max-norm form is implied by the elementwise one (and doubles torch's error)."""
    g = torch.Generator().manual_seed(seed)
    ref = _outcome(torch.randn(1, generator=g) * 10, torch.randn(64, 16, generator=g) * 1e-5,
                   torch.randn(128, 16, generator=g) * 1e-3)  # fmt: skip
    rounded = _outcome(*(ref.get(q).bfloat16().float() for q in ("loss", "grad_e", "grad_c")))
    bounds = tolerances("bf16", ref, rounded)
    for scale in (0.5, 1.0, 3.0):  # inside, at and past what CCE's rule accepts
        parts = []
        for q in ("loss", "grad_e", "grad_c"):
            gt, t = ref.get(q), rounded.get(q)
            tol = SLACK["bf16"] * float(gt.abs().max())
            sign = torch.randint(0, 2, gt.shape, generator=g) * 2 - 1
            u = torch.rand(gt.shape, generator=g)
            parts.append(gt + sign * scale * u * ((gt - t).abs() + tol))
        x = _outcome(*parts)
        cce_ok = all(
            cce_rule(x.get(q), ref.get(q), rounded.get(q), SLACK["bf16"] * ref.get(q).abs().max())
            for q in ("loss", "grad_e", "grad_c")
        )
        verdict = judge(x, ref, bounds)
        assert cce_ok == (scale <= 1.0)  # by construction
        if cce_ok:
            assert verdict.passed, (scale, verdict.explain())
        else:  # well past CCE's rule, the gate refuses too: it is not vacuous
            assert not verdict.passed


def _fwdbwd_rows(path: Path) -> dict[tuple[str, float], dict]:
    rows = json.loads(path.read_text())["rows"]
    return {(r["method"], r["beta"]): r for r in rows if r["phase"] == "fwd+bwd"}


def test_cce_fails_its_own_rule_at_gemma2_2b_on_the_h200():
    """The committed H200 cell (softcap 30, bf16, β 0): the gate's dE tolerance is 2 × torch
    bf16's own error (eager's, measured in the same run's gate) plus the slack, and CCE's dE
    error is past what CCE's elementwise rule admits at that slack, filter or not."""
    cell = _fwdbwd_rows(H200 / "1-cell-tests" / "gemma2-2b-fwdbwd.json")
    peers = _fwdbwd_rows(H200 / "5-eager-cce-no-filter" / "eager-cce-no-filter.json")
    torch_err = peers["eager", 0.0]["grad_e_err"]
    for row in (cell["cce", 0.0], peers["cce-no-filter", 0.0]):
        tol = row["tolerance"]["grad_e"]
        slack = tol - 2 * torch_err
        assert tol == cell["ours", 0.0]["tolerance"]["grad_e"]  # one reference, one bound
        assert 0 < slack < torch_err  # the slack is small beside torch's own error
        assert row["status"] == "wrong" and row["grad_e_err"] > tol
        # CCE's rule: no element's error may pass torch's error there + slack.
        assert row["grad_e_err"] > torch_err + slack
        # Every other quantity is within the gate: only dE fails.
        assert row["loss_err"] <= row["tolerance"]["loss"]
        assert row["grad_c_err"] <= row["tolerance"]["grad_c"]
    # torch's own bf16 error is what ours and torch.compile reach; the gate passes them.
    assert cell["ours", 0.0]["grad_e_err"] <= torch_err and cell["ours", 0.0]["status"] == "ok"


CASE = Case(tokens=8, vocab=16, hidden=4, dtype="fp32")


def test_eager_passes_the_gate_and_a_loss_off_by_twice_its_bound_fails():
    inputs, reference, bounds = gate_reference(CASE, 0, None)
    assert all(0 < bounds[q] < 1e-3 for q in QUANTITIES), bounds
    eager = run_once(functools.partial(case_loss, eager_loss, CASE), inputs)
    assert judge(eager, reference, bounds).passed
    eager.loss += 2 * bounds["loss"]
    verdict = judge(eager, reference, bounds)
    assert not verdict.passed and verdict.explain().startswith("loss error"), verdict


def test_all_ignored_targets_are_named_not_reported_as_nan_errors():
    """Every method used to come back "wrong: loss error nan > tolerance nan"."""
    inputs = make_inputs(CASE, 0)
    inputs.targets[:] = CASE.ignore_index
    with pytest.raises(UnusableInputs, match="every target is ignore_index=-100"):
        check_reference(reference_outcome(CASE, inputs), inputs)


def test_non_finite_inputs_are_counted():
    inputs = make_inputs(CASE, 0)
    with torch.no_grad():
        inputs.e[0, 0] = float("nan")
    with pytest.raises(UnusableInputs, match="e holds 1 NaN/inf"):
        check_reference(reference_outcome(CASE, inputs), inputs)
