"""The correctness gate: eager within its bounds, a wrong loss outside them, and inputs on
which the reference itself is undefined refused."""

from __future__ import annotations

import functools

import pytest
import torch

from perfsuite.baselines.torch_methods import case_loss, eager_loss
from perfsuite.method import Case
from perfsuite.run.correctness import (
    QUANTITIES,
    UnusableInputs,
    check_reference,
    gate_reference,
    judge,
    reference_outcome,
    run_once,
)
from perfsuite.run.inputs import make_inputs

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
