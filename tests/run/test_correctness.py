"""The correctness gate refuses inputs on which the reference itself is undefined."""

from __future__ import annotations

import pytest
import torch

from perfsuite.method import Case
from perfsuite.run.correctness import UnusableInputs, check_reference, reference_outcome
from perfsuite.run.inputs import make_inputs

CASE = Case(tokens=8, vocab=16, hidden=4, dtype="fp32")


def test_finite_reference_passes():
    inputs = make_inputs(CASE, 0)
    check_reference(reference_outcome(CASE, inputs), inputs)


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
