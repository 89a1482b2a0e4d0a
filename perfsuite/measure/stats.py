"""Statistics of timing samples: numpy's quantiles and scipy's one-sided Mann-Whitney U
test, which compare and sensitivity judge slowdowns with (imported on first use: a worker
does not pay for them)."""

from __future__ import annotations

import math
from collections.abc import Sequence

EXACT_LIMIT = 2500  # n1 * n2 up to which the exact U distribution is used (no ties)


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default); NaN for no values."""
    if not values:
        return math.nan
    import numpy as np

    return float(np.quantile(np.asarray(values, dtype=float), q))


def summarize(values: Sequence[float], metric: str) -> float:
    if not values:
        return math.nan
    if metric == "mean":
        return math.fsum(values) / len(values)
    if metric == "min":
        return min(values)
    return quantile(values, {"median": 0.5, "p20": 0.2, "p80": 0.8}[metric])


def mann_whitney_greater_many(
    pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
) -> list[float]:
    """Each ``(x, y)``'s ``mannwhitneyu(x, y, alternative="greater")``, one vectorised call
    per sizes and method; exact without ties up to ``EXACT_LIMIT`` (scipy switches at 8
    per sample: too early for 20-sample cells), else asymptotic; NaN where a side is empty."""
    groups: dict[tuple[int, int, str], list[int]] = {}
    for i, (x, y) in enumerate(pairs):
        if x and y:
            ties = len(set(x) | set(y)) < len(x) + len(y)
            exact = not ties and len(x) * len(y) <= EXACT_LIMIT
            groups.setdefault((len(x), len(y), "exact" if exact else "asymptotic"), []).append(i)
    p_values = [math.nan] * len(pairs)
    if groups:
        import numpy as np
        from scipy.stats import mannwhitneyu

    for (_, _, method), index in groups.items():
        xs = np.array([pairs[i][0] for i in index], dtype=float)
        ys = np.array([pairs[i][1] for i in index], dtype=float)
        found = mannwhitneyu(xs, ys, alternative="greater", method=method, axis=1).pvalue
        for i, p in zip(index, np.atleast_1d(found), strict=True):
            p_values[i] = float(p)
    return p_values


def min_p_value(n1: int, n2: int) -> float:
    """The smallest one-sided p the U test can give for these sample sizes."""
    return 1.0 / math.comb(n1 + n2, n1) if n1 and n2 else 1.0
