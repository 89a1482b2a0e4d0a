"""How well ``rules.judge`` finds regressions in synthetic series (bootstrapped stored samples
with an injected ``Scenario``): detected within ``WINDOW`` runs of the change, else false alarms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

import numpy as np

from perfsuite.history import changepoints, rules

WINDOW = 2
MIN_FLAT = 3


@dataclass(frozen=True)
class Scenario:
    """The injected change: ``per_run`` slower each run for ``runs`` runs (a step: one)."""

    name: str
    per_run: float = 0.0
    runs: int = 1


SCENARIOS = (
    Scenario("none"),
    Scenario("step +3%", 0.03),
    Scenario("step +5%", 0.05),
    Scenario("step +10%", 0.10),
    Scenario("drift +1%/run x10", 0.01, runs=10),
)


@dataclass(frozen=True)
class Rate:
    """Detection and false-alarm rates of one scenario on one device kind."""

    device_kind: str
    scenario: str
    threshold: float
    trials: int
    detected: int  # trials with a regression in the window
    false_alarms: int  # trials with a regression outside it


def synthetic_series(
    samples: Sequence[float],
    scenario: Scenario,
    rng: np.random.Generator,
    device_kind: str = "cuda",
    n_runs: int = 20,
    change_at: int = 12,
    run_noise: float = 0.0,
) -> rules.Series:
    """One synthetic history of a cell whose samples are ``samples``."""
    base = np.asarray(samples, dtype=float)
    points = []
    steps = np.clip(np.arange(n_runs) - change_at + 1, 0, scenario.runs)  # per run, so far
    for i, factor in enumerate(1.0 + scenario.per_run * steps):
        draw = rng.choice(base, size=len(base), replace=True)
        scale = factor * (1.0 + rng.normal(0.0, run_noise) if run_noise else 1.0)
        p20, median, p80 = np.percentile(draw, [20, 50, 80])
        noise = changepoints.median_se(p20, p80, median, len(draw))
        run = (f"{i:012d}", f"run-{i:04d}", f"sha{i}", "synthetic")
        samples = tuple(float(x) for x in draw * scale)
        points.append(rules.Point(*run, float(median * scale), noise, samples))
    return rules.Series("synthetic", scenario.name, "time", device_kind, points)


def measure(
    samples_by_cell: Sequence[Sequence[float]],
    device_kind: str,
    trials: int = 30,
    scenarios: Sequence[Scenario] = SCENARIOS,
    n_runs: int = 20,
    change_at: int = 12,
    run_noise: float = 0.0,
    seed: int = 0,
) -> list[Rate]:
    """Detection and false-alarm rates of each scenario over every cell's samples."""
    rng = np.random.default_rng(seed)
    threshold = rules.threshold_for("time", device_kind)
    rates = []
    for scenario in scenarios:
        start = max(2, min(change_at, n_runs - scenario.runs - MIN_FLAT))
        window = (start - WINDOW, start + max(scenario.runs, WINDOW))  # where a detection starts
        low, high = window if scenario.per_run else (1, 0)  # nothing to find: an empty window
        detected = false_alarms = 0
        for samples, _ in product(samples_by_cell, range(trials)):
            series = synthetic_series(samples, scenario, rng, device_kind, n_runs, start, run_noise)
            inside = [low <= c.start <= high for c in rules.judge(series) if c.regression]
            detected += any(inside)
            false_alarms += not all(inside)
        total = len(samples_by_cell) * trials
        rates.append(Rate(device_kind, scenario.name, threshold, total, detected, false_alarms))
    return rates


def format_table(rates: Sequence[Rate]) -> str:
    """A plain-text table: one line per device kind and scenario."""
    line = "{:<6} {:<20} {:>5} {:>6} {:>9} {:>13}".format
    lines = [line("device", "scenario", "min", "trials", "detected", "false alarms")]
    for r in rates:
        detected = "-" if r.scenario == "none" else f"{r.detected / r.trials:.0%}"
        least, alarms = f"{r.threshold:.0%}", f"{r.false_alarms / r.trials:.0%}"
        lines.append(line(r.device_kind, r.scenario, least, r.trials, detected, alarms))
    return "\n".join(lines)
