"""Quantiles and the one-sided Mann-Whitney U test behind ``perfsuite compare``."""

from __future__ import annotations

import random

import numpy as np
import pytest

from perfsuite.measure.stats import mann_whitney_greater_many, min_p_value, quantile, summarize


def test_quantile_and_summaries():
    rng = random.Random(1)
    values = [rng.lognormvariate(0, 0.3) for _ in range(37)]
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([5.0, 1.0, 4.0, 2.0, 3.0], 0.8) == pytest.approx(4.2)  # sorted first
    assert quantile([0.0, 10.0], 0.2) == pytest.approx(2.0)  # linear interpolation
    assert summarize(values, "mean") == pytest.approx(float(np.mean(values)))
    assert summarize(values, "min") == min(values)
    assert summarize([], "median") != summarize([], "median")  # NaN


def test_mann_whitney_exact_small_cases():
    # 3 vs 3 fully separated: 1 ordering of C(6, 3) = 20.
    pairs = [([4, 5, 6], [1, 2, 3]), ([1, 2, 3], [4, 5, 6])]
    assert mann_whitney_greater_many(pairs) == pytest.approx([1 / 20, 1.0])
    assert min_p_value(3, 3) == pytest.approx(1 / 20)
    # 20 vs 20 separated, no ties: exact, 1 / C(40, 20).
    [p] = mann_whitney_greater_many([(list(range(20, 40)), list(range(20)))])
    assert p == pytest.approx(min_p_value(20, 20), rel=1e-9)


def test_ties_take_the_normal_approximation():
    x, y = [1.0, 2.0, 2.0, 3.0], [2.0, 1.0, 0.0, 0.0]
    p, empty = mann_whitney_greater_many([(x, y), ([], y)])
    assert 0 < p < 0.5 and empty != empty
