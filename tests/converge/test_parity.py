"""Parity verdicts on hand-made runs: fixed tolerances, the 16-bit yardstick, failures."""

from __future__ import annotations

import torch

from perfsuite.converge.parity import attach_verdicts
from perfsuite.converge.train import RunResult


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
