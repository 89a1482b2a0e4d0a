"""Statistics of timing samples, without numpy/scipy at import: quantiles as
numpy computes them and the one-sided Mann-Whitney U test that ``perfsuite
compare`` and the sensitivity harness judge slowdowns with."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(values: Sequence[float], metric: str) -> float:
    if not values:
        return math.nan
    if metric == "mean":
        return math.fsum(values) / len(values)
    if metric == "min":
        return min(values)
    return quantile(values, {"median": 0.5, "p20": 0.2, "p80": 0.8}[metric])


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) and the sizes of the groups of ties."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


@lru_cache(maxsize=64)
def _u_distribution(n1: int, n2: int) -> tuple[float, ...]:
    """Number of orderings giving each U in 0..n1*n2 (Mann and Whitney's recursion)."""
    import numpy as np

    size = n1 * n2 + 1
    # table[j] holds the counts for (i, j) while i runs from 0 to n1.
    table = [np.zeros(size) for _ in range(n2 + 1)]
    for j in range(n2 + 1):
        table[j][0] = 1.0  # i == 0: one ordering, U = 0
    for _ in range(1, n1 + 1):
        new = [np.zeros(size) for _ in range(n2 + 1)]
        new[0][0] = 1.0  # j == 0: U = 0
        for j in range(1, n2 + 1):
            # The largest value is from sample 1 (beats all j of sample 2) or not.
            new[j][j:] += table[j][: size - j]
            new[j] += new[j - 1]
        table = new
    return tuple(float(x) for x in table[n2])


EXACT_LIMIT = 2500  # n1 * n2 up to which the exact distribution is used


def mann_whitney_greater(x: Sequence[float], y: Sequence[float]) -> float:
    """One-sided Mann-Whitney U p-value for "x tends to be larger than y".

    Exact without ties when ``len(x) * len(y) <= EXACT_LIMIT``; otherwise the
    normal approximation with tie correction and continuity correction (as
    ``scipy.stats.mannwhitneyu(x, y, alternative="greater")``).
    """
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        return math.nan
    ranks, ties = _ranks([*x, *y])
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    if not ties and n1 * n2 <= EXACT_LIMIT:
        counts = _u_distribution(n1, n2)
        total = math.fsum(counts)
        return min(1.0, math.fsum(counts[math.ceil(u1 - 1e-9) :]) / total)
    n = n1 + n2
    tie_term = sum(t**3 - t for t in ties) / (n * (n - 1))
    variance = n1 * n2 / 12 * ((n + 1) - tie_term)
    if variance <= 0:
        return 1.0
    z = (u1 - n1 * n2 / 2 - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


def min_p_value(n1: int, n2: int) -> float:
    """The smallest one-sided p the U test can give for these sample sizes."""
    return 1.0 / math.comb(n1 + n2, n1) if n1 and n2 else 1.0
