"""Quantiles and the one-sided Mann-Whitney U test behind ``perfsuite compare``."""

from __future__ import annotations

import random

import pytest

from perfsuite.measure.stats import (
    EXACT_LIMIT,
    mann_whitney_greater,
    min_p_value,
    quantile,
    summarize,
)


def test_quantile_and_summaries_match_numpy():
    np = pytest.importorskip("numpy")
    rng = random.Random(1)
    values = [rng.lognormvariate(0, 0.3) for _ in range(37)]
    for q in (0.0, 0.2, 0.5, 0.8, 1.0):
        assert quantile(values, q) == pytest.approx(float(np.quantile(values, q)))
    assert summarize(values, "mean") == pytest.approx(float(np.mean(values)))
    assert summarize(values, "min") == min(values)
    assert summarize([], "median") != summarize([], "median")  # NaN


def test_mann_whitney_exact_small_cases():
    assert mann_whitney_greater([4, 5, 6], [1, 2, 3]) == pytest.approx(1 / 20)
    assert mann_whitney_greater([1, 2, 3], [4, 5, 6]) == pytest.approx(1.0)
    assert min_p_value(3, 3) == pytest.approx(1 / 20)
    # n=20 each, fully separated: about 1e-11.
    assert mann_whitney_greater(list(range(20, 40)), list(range(20))) < 1e-10


def test_mann_whitney_matches_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(0)
    for trial in range(60):
        n1, n2 = rng.randint(1, 25), rng.randint(1, 25)
        digits = 2 if trial % 2 else 9  # half with ties
        x = [round(rng.gauss(1.02, 0.05), digits) for _ in range(n1)]
        y = [round(rng.gauss(1.0, 0.05), digits) for _ in range(n2)]
        ties = len(set(x + y)) < n1 + n2
        method = "asymptotic" if ties or n1 * n2 > EXACT_LIMIT else "exact"
        expected = scipy_stats.mannwhitneyu(x, y, alternative="greater", method=method).pvalue
        assert mann_whitney_greater(x, y) == pytest.approx(expected, rel=1e-9, abs=1e-12)
