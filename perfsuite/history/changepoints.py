"""Change points of one series (a cell's median time or peak memory over runs).

The search is ``ruptures``' PELT (Killick et al. 2012: exact optimal
segmentation under a linear penalty) with the L2 cost, i.e. shifts of the
mean, on the series divided by its median so that one penalty fits every cell.
The penalty is BIC-like, ``PENALTY_FACTOR * sigma**2 * log(n)``, with ``sigma``
the series' noise: the larger of its run-to-run scatter (robust, from first
differences, so that a step does not inflate it) and the sampling error of one
run's median (from that run's p20-p80 spread). Each segment is at least
``MIN_SIZE`` runs: a change must persist over two runs to be found at all.

Which change points matter is ``rules``' decision, not this module's.
"""

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


class RupturesMissing(RuntimeError):
    """``ruptures`` is not importable (an environment run from a checkout, e.g. a lent GPU)."""


def robust_sigma(values: Sequence[float]) -> float:
    """Scatter of a series around its local level: MAD of first differences / sqrt(2).

    First differences cancel any level, so a step in the series moves one
    difference only and barely changes the median absolute deviation.
    """
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
    """Indices where a new segment starts (each >= MIN_SIZE runs); [] if none.

    ``values`` are in run order; ``sigma`` is the relative noise (None: estimate
    it from the series). Series shorter than ``2 * MIN_SIZE`` have no change point.
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 2 * MIN_SIZE or not np.all(np.isfinite(x)):
        return []
    level = float(np.median(x))
    if level == 0:
        return []
    y = x / level - 1.0
    if sigma is None:
        sigma = robust_sigma(y)
    sigma = max(sigma, SIGMA_FLOOR)
    penalty = PENALTY_FACTOR * sigma**2 * math.log(n)
    try:  # here, when a series is long enough to search: every other command runs without it
        import ruptures
    except ImportError:
        raise RupturesMissing("change points need ruptures: pip install ruptures") from None
    algo = ruptures.Pelt(model="l2", min_size=MIN_SIZE, jump=1).fit(y.reshape(-1, 1))
    ends = algo.predict(pen=penalty)
    return [int(e) for e in ends[:-1]]
