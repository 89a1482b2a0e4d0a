"""Which change points are regressions (docs/history.md's rule) and ``history check``'s
verdicts; consecutive changes one way merge, so a drift is a staircase of small steps."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby, pairwise
from typing import Any

import numpy as np

from perfsuite.history import changepoints, store
from perfsuite.measure.machine import document_busy
from perfsuite.regress.verdicts import CPU_MEMORY_SLACK_BYTES, Settings, method_label

NOISE_SIGMAS = 4.0
MIN_PERSISTENCE = 2
# One-sided Mann-Whitney U on the pooled raw samples of the runs before and after.
ALPHA = 0.001


@dataclass(frozen=True)
class Point:
    """One run's value of one cell."""

    run_hash: str
    created: str
    sha: str
    env_hash: str
    value: float
    noise: float = 0.0  # relative standard error of this value (0: unknown or exact)
    samples: tuple[float, ...] = ()  # the run's raw samples (time only)


@dataclass(frozen=True)
class Series:
    cell_id: str
    label: str
    metric: str  # "time" or "memory"
    device_kind: str
    points: list[Point]


@dataclass
class Change:
    """One (merged) change point of a series and the rule's judgement of it."""

    series: Series
    start: int  # index of the first run after the change (its largest step)
    before: float
    after: float
    size: float  # after / before - 1
    persistence: int  # runs in the segment after the (last) step
    noise_bound: float  # the size the noise alone could produce
    regression: bool
    recovered: bool = False
    why_not: list[str] = field(default_factory=list)

    @property
    def before_point(self) -> Point:
        return self.series.points[self.start - 1]

    @property
    def after_point(self) -> Point:
        return self.series.points[self.start]

    @property
    def ident(self) -> str:
        """``CELL/RUN``: what ``history ack`` takes."""
        return f"{self.series.cell_id}/{self.after_point.run_hash[:12]}"


def threshold_for(metric: str, device_kind: str) -> float:
    """The minimum relative change that counts: ``perfsuite compare``'s defaults."""
    default = Settings()
    return default.memory_threshold if metric == "memory" else default.threshold_for(device_kind)


def scatter(series: Series) -> float:
    """Run-to-run scatter of a series' values relative to their median."""
    values = np.array([p.value for p in series.points], dtype=float)
    return changepoints.robust_sigma(values / (float(np.median(values)) or 1.0))


def judge(series: Series) -> list[Change]:
    """The merged change points of a series, each judged by the rule above."""
    values = [p.value for p in series.points]
    # The relative noise of one value: run-to-run scatter, floored by the per-run error.
    per_run = float(np.median([p.noise for p in series.points]))  # a series has points
    sigma = max(scatter(series), per_run, changepoints.SIGMA_FLOOR)
    bounds = [0, *changepoints.detect(values, sigma), len(values)]
    levels = [float(np.median(values[a:b])) for a, b in pairwise(bounds)]
    # Floored too by the runs' relative scatter around their segment's level.
    segments = zip(pairwise(bounds), levels, strict=True)
    resid = [v / level - 1 for (a, b), level in segments for v in values[a:b] if level]
    dof = len(resid) - len(levels)
    sigma = max(sigma, float(np.sqrt(np.sum(np.square(resid)) / dof)) if dof > 0 else 0.0)
    sizes = [levels[j] / levels[j - 1] - 1 if levels[j - 1] else 0.0 for j in range(1, len(levels))]
    limit = threshold_for(series.metric, series.device_kind)
    changes = []
    # Chains of consecutive steps in one direction: j indexes segments after a step.
    for _, chain_iter in groupby(range(1, len(levels)), key=lambda j: sizes[j - 1] > 0):
        chain = list(chain_iter)
        first, last = chain[0], chain[-1]
        before, after = levels[first - 1], levels[last]
        size = after / before - 1 if before else 0.0
        runs_before = series.points[bounds[first - 1] : bounds[first]]
        runs_after = series.points[bounds[last] : bounds[last + 1]]
        n_before, n_after = len(runs_before), len(runs_after)
        spread = sigma * math.sqrt(1 / n_before + 1 / n_after)
        noise_bound = NOISE_SIGMAS * changepoints.MEDIAN_SE_FACTOR * spread
        why_not = []
        if size <= 0:
            why_not.append("faster" if series.metric == "time" else "less memory")
        if abs(size) < limit:
            why_not.append(f"{size:+.1%} under the {limit:.0%} minimum")
        if abs(size) < noise_bound:
            why_not.append(f"{size:+.1%} within noise ({noise_bound:.1%})")
        p_value = _u_test(runs_before, runs_after, size)
        if p_value is not None and p_value >= ALPHA:
            why_not.append(f"samples not significantly apart (U test p={p_value:.2g})")
        if n_after < MIN_PERSISTENCE:
            why_not.append(f"{n_after} run after the change")
        cpu_rss = series.metric == "memory" and series.device_kind == "cpu"
        if cpu_rss and after - before < CPU_MEMORY_SLACK_BYTES:
            why_not.append("under the CPU RSS resolution")
        # The culprit: the chain's largest single step (a noise step merged before
        # a real one must not move the blame onto an older commit).
        culprit = max(chain, key=lambda j: abs(sizes[j - 1]))
        recovered = any(level <= before * (1 + limit) for level in levels[last + 1 :])
        regression = not why_not
        found = (bounds[culprit], before, after, size, n_after, noise_bound, regression)
        changes.append(Change(series, *found, recovered and regression, why_not))
    return changes


def _u_test(runs_before: list[Point], runs_after: list[Point], size: float) -> float | None:
    """One-sided U test of the samples after the change against before (None: no samples):
    run medians jumping between a bimodal timing's modes do not move the pooled samples."""
    before = [s for p in runs_before for s in p.samples]
    after = [s for p in runs_after for s in p.samples]
    if len(before) < 3 or len(after) < 3 or size == 0:
        return None
    from scipy.stats import mannwhitneyu

    side = "greater" if size > 0 else "less"
    return float(mannwhitneyu(after, before, alternative=side, method="asymptotic").pvalue)


def extras(key: Mapping[str, Any], sep: str = " ") -> str:
    """A cell's softcap and workload, where they are not the default, for its name."""
    softcap = "" if key["softcap"] is None else f" softcap={key['softcap']:g}"
    return softcap + ("" if key["workload"] == "random" else f"{sep}{key['workload']}")


def _point(row: sqlite3.Row, metric: str) -> Point | None:
    run = (row["content_hash"], row["created"], row["sha"], row["env_hash"])
    if row["status"] != "ok":
        return None
    if metric == "memory":
        peak = row["peak_bytes"]
        return Point(*run, float(peak)) if peak is not None and peak > 0 else None
    median = row["median_ms"]
    if row["interpreted"] or median is None or median <= 0:
        return None
    samples = tuple(json.loads(row["samples_json"]))
    noise = changepoints.median_se(row["p20_ms"], row["p80_ms"], median, len(samples))
    return Point(*run, float(median), noise, samples)


def cells(conn: sqlite3.Connection, device: str | None = None) -> Iterator[list[sqlite3.Row]]:
    """Each cell's rows (of one device, if given) in time order, a merged file's repeats once."""
    for _, rows in groupby(store.cell_rows(conn, device), key=lambda r: r["cell_id"]):
        first: dict[tuple, sqlite3.Row] = {}
        for row in rows:
            key = (row["samples_json"],)
            if key == ("[]",):
                key = (row["created"], row["status"], row["median_ms"], row["peak_bytes"])
            first.setdefault(key, row)
        yield list(first.values())


def load_series(
    conn: sqlite3.Connection,
    metrics: Sequence[str] = store.METRICS,
    device: str | None = None,
    untimed: Collection[str] = (),
) -> list[Series]:
    """Every cell's series per metric in run order; runs in ``untimed`` (busy) give no time."""
    return [s for rows in cells(conn, device) for s in cell_series(rows, metrics, untimed)]


def cell_series(
    rows: list[sqlite3.Row], metrics: Sequence[str] = store.METRICS, untimed: Collection[str] = ()
) -> list[Series]:
    """The series of one cell (``rows``: its de-duplicated rows in time order), per metric."""
    first, out = rows[0], []
    name = f"{first['device_name']} {method_label(first['method'], first['tp'])} {first['phase']}"
    size = f"{first['tokens']}x{first['vocab']}x{first['hidden']}"
    label = f"{name} {size} {first['dtype']} beta={first['beta']:g}" + extras(first)
    for metric in metrics:
        kept = [r for r in rows if metric != "time" or r["content_hash"] not in untimed]
        points = [p for p in (_point(r, metric) for r in kept) if p is not None]
        if points:
            out.append(Series(first["cell_id"], label, metric, first["device_kind"], points))
    return out


def verdict(change: Change, acknowledged: dict[tuple[str, str, str], str]) -> str:
    """``open``, ``acknowledged`` or ``recovered`` for a regression; ``change`` otherwise."""
    if not change.regression:
        return "change"
    if ack_reason(change, acknowledged) is not None:
        return "acknowledged"
    return "recovered" if change.recovered else "open"


def ack_reason(change: Change, acknowledged: dict[tuple[str, str, str], str]) -> str | None:
    """Why the change was acknowledged, for its metric or both (None: it was not)."""
    key = (change.series.cell_id, change.after_point.run_hash)
    return acknowledged.get((*key, change.series.metric), acknowledged.get((*key, "*")))


def busy_runs(conn: sqlite3.Connection) -> dict[str, str]:
    """Runs measured on a busy machine, hash -> why: their times would call noise a change."""
    runs = conn.execute("SELECT content_hash, env_json FROM runs ORDER BY created, id")
    whys = {r[0]: document_busy({"env": json.loads(r[1]), "rows": []}) for r in runs}
    return {run: why for run, why in whys.items() if why}
