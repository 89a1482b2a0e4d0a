"""The judging half of ``perfsuite sensitivity``: every trial (a
``perfsuite compare`` of two runs from different processes) judged by the
detector, giving false-alarm and detection rates with their intervals, a
threshold sweep, the smallest slowdown caught, and the noise seen."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from perfsuite.measure.stats import mann_whitney_greater, quantile, summarize
from perfsuite.regress.sensitivity_collect import UNCHANGED
from perfsuite.regress.verdicts import DEFAULT_ALPHA, DEFAULT_TIME_THRESHOLDS, classify_time

THRESHOLD_GRID = (0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.125, 0.15, 0.2)
SCALED_GRID = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3)
TARGET_DETECTION = 0.95
TARGET_FALSE_ALARMS = 0.01


def rate_bounds(k: int, n: int) -> tuple[float, float]:
    """Wilson score interval of a rate k/n (95 %)."""
    if n == 0:
        return (math.nan, math.nan)
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(method="wilson")
    return (float(ci.low), float(ci.high))


@dataclass
class Rate:
    condition: float  # nominal slowdown, 0 for unchanged
    injected: float | None  # measured slowdown actually injected
    flagged: int
    trials: int

    @property
    def rate(self) -> float:
        return self.flagged / self.trials if self.trials else math.nan

    @property
    def bounds(self) -> tuple[float, float]:
        return rate_bounds(self.flagged, self.trials)


@dataclass
class Report:
    config: dict[str, Any]
    settings: dict[str, Any]
    independent_runs: int
    rates: list[Rate]
    sweep: list[dict[str, float]]  # threshold -> false alarms, detection per condition
    scaled: list[dict[str, float]]  # δ -> detection at the default threshold
    smallest_caught: float | None  # scaled estimate, >= 95 % detection
    recommended_threshold: float | None
    noise: dict[str, float]
    collect_s: float | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["rates"] = [{**asdict(r), "rate": r.rate, "ci95": list(r.bounds)} for r in self.rates]
        return data


def _pairs(n_proc: int, n_runs: int) -> list[tuple[int, int, int]]:
    """(baseline process, current process, round): every ordered pair of processes."""
    if n_proc == 1:  # one process: pair each round with the next
        return [(0, 0, r) for r in range(n_runs)]
    return [
        (a, b, r) for a in range(n_proc) for b in range(n_proc) if a != b for r in range(n_runs)
    ]


def analyse(
    data: dict[str, Any],
    threshold: float | None = None,
    alpha: float = DEFAULT_ALPHA,
) -> Report:
    """Rates at ``threshold`` (default: compare's default for the device) and a sweep."""
    cfg = data["config"]
    if threshold is None:
        threshold = DEFAULT_TIME_THRESHOLDS.get(cfg.get("device", "cpu"), 0.05)
    procs = data["processes"]
    conditions = [UNCHANGED, *cfg["slowdowns"]]
    n_proc, n_runs = len(procs), len(procs[0][f"{UNCHANGED:g}"])
    pairs = _pairs(n_proc, n_runs)
    base_runs = {
        (p, r): procs[p][f"{UNCHANGED:g}"][r] for p in range(n_proc) for r in range(n_runs)
    }

    def current(cond: float, b: int, r: int) -> list[float]:
        runs = procs[b][f"{cond:g}"]
        return runs[(r + 1) % n_runs] if n_proc == 1 else runs[r]

    # Per trial: the ratio and p(slower), once; compare's time rule judges them at any
    # threshold (a cell's whole verdict here: one ok row a side, no memory).
    def trial(base: list[float], cur: list[float]) -> tuple[float, float]:
        ratio = summarize(cur, "median") / summarize(base, "median")
        return ratio, mann_whitney_greater(cur, base)

    def flagged(stats: list[tuple[float, float]], t: float) -> int:
        return sum(classify_time(x, p, 1.0, t, alpha) == "regression" for x, p in stats)

    trials = {
        c: [trial(base_runs[(a, r)], current(c, b, r)) for a, b, r in pairs] for c in conditions
    }
    rates = []
    for cond in conditions:
        injected = None
        if cond != UNCHANGED:  # paired: same process, same round
            ratios = [
                summarize(procs[p][f"{cond:g}"][r], "median")
                / summarize(base_runs[(p, r)], "median")
                for p in range(n_proc)
                for r in range(n_runs)
            ]
            injected = quantile(ratios, 0.5) - 1
        rates.append(Rate(cond, injected, flagged(trials[cond], threshold), len(pairs)))

    sweep = [
        {"threshold": t, "false_alarms": flagged(trials[UNCHANGED], t) / len(pairs)}
        | {f"detected_{c:g}": flagged(trials[c], t) / len(pairs) for c in cfg["slowdowns"]}
        for t in sorted({*THRESHOLD_GRID, threshold})
    ]

    scaled = []
    for delta in SCALED_GRID:
        stats = [
            trial(base_runs[(a, r)], [x * (1 + delta) for x in current(UNCHANGED, b, r)])
            for a, b, r in pairs
        ]
        scaled.append({"slowdown": delta, "detected": flagged(stats, threshold) / len(pairs)})
    smallest = next((s["slowdown"] for s in scaled if s["detected"] >= TARGET_DETECTION), None)

    notes = []
    load = data.get("load")
    # The harness itself keeps about one core per torch thread busy.
    if load and max(load["before"], load["after"]) > (load["cores"] or 1) + 0.5:
        notes.append(
            f"the machine was busy (load average {load['before']:.1f} before, "
            f"{load['after']:.1f} after, on {load['cores']} cores): these rates measure that "
            "contention, not the detector on a quiet machine"
        )
    for r in rates:
        if r.injected is not None and abs(r.injected - r.condition) > 0.5 * r.condition:
            notes.append(
                f"+{r.condition:.0%} was calibrated to {r.injected:+.1%}: the calibration "
                "ran under different noise than the measurement"
            )
    return Report(
        notes=notes,
        config=cfg,
        settings={"threshold": threshold, "alpha": alpha, "metric": "median"},
        independent_runs=n_proc * n_runs,
        rates=rates,
        sweep=sweep,
        scaled=scaled,
        smallest_caught=smallest,
        recommended_threshold=recommend_threshold(sweep, cfg["slowdowns"]),
        noise=noise_summary(procs, n_proc, n_runs),
        collect_s=data.get("collect_s"),
    )


def recommend_threshold(sweep: list[dict[str, float]], slowdowns: Sequence[float]) -> float | None:
    """The middle of the thresholds that meet both targets (false alarms <= 1 %,
    the smallest injected slowdown caught >= 95 %); without any, the smallest
    threshold that keeps false alarms <= 1 %."""
    quiet = [s for s in sweep if s["false_alarms"] <= TARGET_FALSE_ALARMS]
    if not quiet:
        return None
    key = f"detected_{min(slowdowns):g}"
    good = [s["threshold"] for s in quiet if s[key] >= TARGET_DETECTION]
    return good[(len(good) - 1) // 2] if good else min(s["threshold"] for s in quiet)


def noise_summary(procs: list[dict[str, Any]], n_proc: int, n_runs: int) -> dict[str, float]:
    """Within-run spread, run-to-run and process-to-process spread of unchanged runs."""
    key = f"{UNCHANGED:g}"
    medians = [
        [summarize(procs[p][key][r], "median") for r in range(n_runs)] for p in range(n_proc)
    ]
    within = [
        (quantile(s, 0.8) - quantile(s, 0.2)) / quantile(s, 0.5)
        for p in range(n_proc)
        for s in procs[p][key]
    ]
    flat = [m for ms in medians for m in ms]
    centre = quantile(flat, 0.5)
    per_proc = [quantile(ms, 0.5) for ms in medians]
    return {
        "median_ms": centre,
        "within_run_p20_p80": quantile(within, 0.5),
        "run_to_run_iqr": (quantile(flat, 0.75) - quantile(flat, 0.25)) / centre,
        "process_to_process_range": (max(per_proc) - min(per_proc)) / centre,
    }
