"""Change points of one series (a cell's median time or peak memory over runs): ruptures'
PELT, L2 cost on the series over its median, a BIC-like penalty scaled by its noise."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MIN_SIZE = 2
PENALTY_FACTOR = 3.0
# Noise floor (relative): below this, a series is treated as exact (memory).
SIGMA_FLOOR = 1e-4
# p80 - p20 of a normal distribution, in standard deviations.
P20_P80_SIGMAS = 1.6832
# The standard error of a median is this factor times the mean's (normal data).
MEDIAN_SE_FACTOR = 1.2533


class RupturesMissing(ValueError):
    """``ruptures`` is not importable (a checkout run as it is, e.g. on a lent GPU): exit 2."""


def robust_sigma(values: Sequence[float]) -> float:
    """Scatter around the local level: MAD of first differences / sqrt(2) (a step moves one)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 3:
        return 0.0
    d = np.diff(x)
    mad = float(np.median(np.abs(d - np.median(d))))
    return 1.4826 * mad / math.sqrt(2)


def median_se(p20: float | None, p80: float | None, median: float | None, n: int) -> float:
    """Relative standard error of one run's median from its p20-p80 spread and sample count."""
    if not median or p20 is None or p80 is None or n < 2:
        return 0.0
    sigma = (p80 - p20) / P20_P80_SIGMAS / median
    return MEDIAN_SE_FACTOR * max(sigma, 0.0) / math.sqrt(n)


def detect(values: Sequence[float], sigma: float | None = None) -> list[int]:
    """Where new segments of ``values`` start ([] if none); ``sigma``: the relative noise."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 2 * MIN_SIZE or not np.all(np.isfinite(x)):
        return []
    level = float(np.median(x))
    if level == 0:
        return []
    y = x / level - 1.0
    sigma = max(robust_sigma(y) if sigma is None else sigma, SIGMA_FLOOR)
    penalty = PENALTY_FACTOR * sigma**2 * math.log(n)
    try:  # here, when a series is long enough to search: every other command runs without it
        import ruptures
    except ImportError:
        raise RupturesMissing("change points need ruptures: pip install ruptures") from None
    algo = ruptures.Pelt(model="l2", min_size=MIN_SIZE, jump=1).fit(y.reshape(-1, 1))
    return [int(e) for e in algo.predict(pen=penalty)[:-1]]  # the last: the series' end
