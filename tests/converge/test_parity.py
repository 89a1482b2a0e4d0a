"""Parity verdicts on hand-made runs: fixed tolerances, the yardsticks of eager's own
rounding (16-bit and fp32), failures."""

from __future__ import annotations

import pytest
import torch

from perfsuite.baselines.torch_methods import eager_loss
from perfsuite.converge.parity import attach_verdicts
from perfsuite.converge.train import RunResult
from perfsuite.method import Case
from perfsuite.plan.registry import get_method


def _run(method: str, losses: list[float], params: list[float], dtype: str = "fp32", **kw):
    steps = [{"step": i, "loss": x} for i, x in enumerate(losses)]
    return RunResult(method, 0.0, dtype, steps=steps, params=torch.tensor(params), **kw)


def test_fp32_tolerances():
    eager = _run("eager", [6.0, 5.0], [0.1, -0.2])
    close = _run("ours", [6.0 * (1 + 1e-5), 5.0], [0.1 + 1e-3, -0.2])  # rtol 2e-5, atol 5e-3
    far = _run("bad", [6.0 * (1 + 1e-4), 5.0], [0.1, -0.2])
    attach_verdicts([eager, close, far])
    assert eager.parity == {"verdict": "reference"}
    assert close.parity["verdict"] == "same"
    assert far.parity["verdict"] == "differs" and far.parity["loss_first_step_over_tol"] == 0


def test_bf16_is_judged_against_eagers_own_noise():
    eager = _run("eager", [6.0, 5.0], [0.1, -0.2], "bf16")
    yard = _run("reference", [6.0, 5.1], [0.1, -0.23], "bf16")  # eager is 0.1 / 0.03 off
    ours = _run("ours", [6.0, 5.15], [0.1, -0.25], "bf16")  # 0.15 <= 2 x 0.1; 0.05 <= 0.06
    wrong = _run("wrong", [6.0, 5.3], [0.1, -0.2], "bf16")  # 0.3 > 2 x 0.1
    attach_verdicts([eager, yard, ours, wrong])
    assert yard.parity["verdict"] == "yardstick"
    assert ours.parity["verdict"] == "same"
    assert wrong.parity["verdict"] == "differs"


def test_failed_runs_get_no_verdict():
    eager = _run("eager", [6.0], [0.1], status="error", reason="boom")
    ours = _run("ours", [6.0], [0.1])
    crashed = _run("other", [], [], status="error", reason="x")
    attach_verdicts([eager, ours, crashed])
    assert ours.parity["verdict"] == "no reference"
    assert crashed.parity == {"verdict": "—"}


def test_fp32_long_runs_are_read_against_eagers_own_rounding():
    """Past Liger's fixed tolerance, a method passes if it is no farther from eager than
    twice eager-reordered (eager's math, another rounding) is."""
    eager = _run("eager", [6.0, 5.0, 4.0], [0.1, -0.2])
    yard = _run("eager-reordered", [6.0, 5.0, 4.001], [0.1, -0.2])  # rounding, amplified
    drifted = _run("ours", [6.0, 5.0, 4.0015], [0.1, -0.2])  # 1.5e-3 <= 2 x 1e-3
    far = _run("bad", [6.0, 5.0, 4.003], [0.1, -0.2])  # 3e-3 > 2 x 1e-3
    attach_verdicts([eager, yard, drifted, far])
    assert yard.parity["verdict"] == "yardstick"
    assert yard.parity["loss_first_step_over_tol"] == 2
    assert drifted.parity["verdict"] == "same"
    assert drifted.parity["eager_noise"]["loss_max_abs"] == pytest.approx(1e-3)
    assert far.parity["verdict"] == "differs"


def test_eager_reordered_is_eagers_loss_and_gradient_with_another_rounding():
    gen = torch.Generator().manual_seed(0)
    e = torch.randn(64, 16, generator=gen, requires_grad=True)
    c = torch.randn(50, 16, generator=gen, requires_grad=True)
    t = torch.randint(0, 50, (64,), generator=gen)
    t[3] = -100  # ignored, as in eager
    case = Case(tokens=64, vocab=50, hidden=16, dtype="fp32", beta=0.1)
    reordered = get_method("eager-reordered").prepare(case, c)(e, c, t)
    (ge, gc) = torch.autograd.grad(reordered, (e, c))
    eager = eager_loss(e, c, t, 0.1, None)
    (ee, ec) = torch.autograd.grad(eager, (e, c))
    torch.testing.assert_close(reordered, eager, rtol=1e-6, atol=0)
    torch.testing.assert_close(ge, ee, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(gc, ec, rtol=1e-5, atol=1e-7)
