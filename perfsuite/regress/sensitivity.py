"""``perfsuite sensitivity``: how often ``compare``'s rule flags unchanged code here and how
often it catches a real slowdown, judged in trials comparing two processes' runs."""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from itertools import permutations, product, starmap
from pathlib import Path
from typing import Any

from perfsuite.args import int_between, level, positive_int
from perfsuite.fit import TrimmedConsole, pipe_table
from perfsuite.measure.stats import mann_whitney_greater_many, quantile, summarize
from perfsuite.plan.registry import all_methods
from perfsuite.regress.compare import parse_fraction
from perfsuite.regress.sensitivity_collect import QUICK, UNCHANGED, HarnessConfig, collect
from perfsuite.regress.verdicts import DEFAULT_ALPHA, Settings, classify_time
from perfsuite.results.outpath import check_output_file
from perfsuite.results.results import read_json, write_results

THRESHOLD_GRID = (0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.125, 0.15, 0.2)
SCALED_GRID = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3)
TARGET_DETECTION = 0.95
TARGET_FALSE_ALARMS = 0.01


def rate_bounds(k: int, n: int) -> tuple[float, float]:
    """Wilson score interval of a rate k/n (95 %)."""
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
        return self.flagged / self.trials  # trials >= 2: argparse refuses fewer runs

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
        rates = [{**asdict(r), "rate": r.rate, "ci95": list(r.bounds)} for r in self.rates]
        return asdict(self) | {"rates": rates}


def analyse(
    data: dict[str, Any],
    threshold: float | None = None,
    alpha: float = DEFAULT_ALPHA,
) -> Report:
    """Rates at ``threshold`` (default: compare's default for the device) and a sweep."""
    cfg = data["config"]
    threshold = Settings(time_threshold=threshold).threshold_for(cfg.get("device", "cpu"))
    procs = data["processes"]  # [process][condition] -> [round] -> samples
    conditions = [UNCHANGED, *cfg["slowdowns"]]
    n_proc, n_runs = len(procs), len(procs[0][f"{UNCHANGED:g}"])
    # (baseline process, current process, round): every ordered pair of processes; with
    # one process, each round against the next.
    processes = permutations(range(n_proc), 2) if n_proc > 1 else [(0, 0)]
    pairs = [(a, b, r) for a, b in processes for r in range(n_runs)]
    rounds = list(product(range(n_proc), range(n_runs)))
    base = [runs[f"{UNCHANGED:g}"] for runs in procs]

    def current(cond: float, b: int, r: int) -> list[float]:
        return procs[b][f"{cond:g}"][(r + 1) % n_runs if n_proc == 1 else r]

    def ratio(before: list[float], after: list[float]) -> float:
        return summarize(after, "median") / summarize(before, "median")

    # Per trial: the ratio and p(slower), once; compare's time rule judges them at any
    # threshold (a cell's whole verdict here: one ok row a side, no memory).
    def trials_of(sides: list[tuple[list[float], list[float]]]) -> list[tuple[float, float]]:
        p_slower = mann_whitney_greater_many([(after, before) for before, after in sides])
        return list(zip(starmap(ratio, sides), p_slower, strict=True))

    def flagged(stats: list[tuple[float, float]], t: float) -> int:
        return sum(classify_time(x, p, 1.0, t, alpha) == "regression" for x, p in stats)

    trials = {
        c: trials_of([(base[a][r], current(c, b, r)) for a, b, r in pairs]) for c in conditions
    }
    rates = []
    for cond in conditions:
        injected = None
        if cond != UNCHANGED:  # paired: same process, same round
            ratios = [ratio(base[p][r], procs[p][f"{cond:g}"][r]) for p, r in rounds]
            injected = quantile(ratios, 0.5) - 1
        rates.append(Rate(cond, injected, flagged(trials[cond], threshold), len(pairs)))

    sweep = [
        {"threshold": t, "false_alarms": flagged(trials[UNCHANGED], t) / len(pairs)}
        | {f"detected_{c:g}": flagged(trials[c], t) / len(pairs) for c in cfg["slowdowns"]}
        for t in sorted({*THRESHOLD_GRID, threshold})
    ]

    scaled = []
    for delta in SCALED_GRID:
        scale = [(a, [x * (1 + delta) for x in current(UNCHANGED, b, r)], r) for a, b, r in pairs]
        stats = trials_of([(base[a][r], cur) for a, cur, r in scale])
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
        noise=noise_summary(procs),
        collect_s=data.get("collect_s"),
    )


def recommend_threshold(sweep: list[dict[str, float]], slowdowns: Sequence[float]) -> float | None:
    """The middle of the thresholds that meet both targets (false alarms <= 1 %, the smallest
    slowdown caught >= 95 %); else the smallest that keeps false alarms <= 1 %."""
    quiet = [s for s in sweep if s["false_alarms"] <= TARGET_FALSE_ALARMS]
    if not quiet:
        return None
    key = f"detected_{min(slowdowns):g}"
    good = [s["threshold"] for s in quiet if s[key] >= TARGET_DETECTION]
    return good[(len(good) - 1) // 2] if good else min(s["threshold"] for s in quiet)


def noise_summary(procs: list[dict[str, Any]]) -> dict[str, float]:
    """Within-run spread, run-to-run and process-to-process spread of unchanged runs."""
    runs = [p[f"{UNCHANGED:g}"] for p in procs]
    medians = [[summarize(s, "median") for s in rs] for rs in runs]
    within = [(quantile(s, 0.8) - quantile(s, 0.2)) / quantile(s, 0.5) for rs in runs for s in rs]
    flat = [m for ms in medians for m in ms]
    centre = quantile(flat, 0.5)
    per_proc = [quantile(ms, 0.5) for ms in medians]
    return {
        "median_ms": centre,
        "within_run_p20_p80": quantile(within, 0.5),
        "run_to_run_iqr": (quantile(flat, 0.75) - quantile(flat, 0.25)) / centre,
        "process_to_process_range": (max(per_proc) - min(per_proc)) / centre,
    }


def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}%}"


def render_markdown(report: Report) -> str:
    cfg, s = report.config, report.settings
    lines = [
        f"Cell: `{cfg['method']}` {cfg['phase']}, N={cfg['tokens']} V={cfg['vocab']} "
        f"D={cfg['hidden']} {cfg['dtype']}, {cfg['samples']} samples per run "
        f"(median {report.noise['median_ms']:.3g} ms); {cfg['processes']} processes × "
        f"{cfg['runs']} rounds = {report.independent_runs} runs per condition; a trial compares "
        f"runs of two different processes. Rule: {s['metric']} ratio ≥ "
        f"{1 + s['threshold']:.3g}× and one-sided Mann-Whitney p < {s['alpha']:g}.",
    ]
    rates = []
    for r in report.rates:
        name = "unchanged (false alarms)" if r.condition == 0 else f"+{r.condition:.0%} slower"
        lo, hi = r.bounds
        flagged = f"{r.flagged}/{r.trials}"
        rates.append([name, _pct(r.injected), flagged, _pct(r.rate), f"{_pct(lo)}–{_pct(hi)}"])
    heads = ["condition", "injected (measured)", "flagged `regression`", "rate", "95% CI"]
    lines += ["", *pipe_table(heads, rates, left=heads[:1]), ""]
    sweep = []
    for row in report.sweep:
        mark = " (default)" if math.isclose(row["threshold"], s["threshold"]) else ""
        cells = [_pct(row[f"detected_{c:g}"]) for c in cfg["slowdowns"]]
        sweep.append([f"{row['threshold']:.1%}{mark}", _pct(row["false_alarms"]), *cells])
    heads = ["threshold", "false alarms", *(f"caught +{c:.0%}" for c in cfg["slowdowns"])]
    lines += pipe_table(heads, sweep, left=heads[:1])
    scaled = ", ".join(f"+{x['slowdown']:.0%}: {_pct(x['detected'], 0)}" for x in report.scaled)
    none_caught = f"none up to {SCALED_GRID[-1]:.0%}"
    n = report.noise
    lines += [
        "",
        f"Unchanged runs with the current samples scaled by 1+δ (detection at the default "
        f"threshold): {scaled}. Smallest slowdown caught in ≥ 95% of trials: "
        f"{_pct(report.smallest_caught, 0) if report.smallest_caught else none_caught}.",
        "",
        f"Noise: within a run p20–p80 spans {_pct(n['within_run_p20_p80'])} of the median; "
        f"run-to-run IQR {_pct(n['run_to_run_iqr'])}; process-to-process range "
        f"{_pct(n['process_to_process_range'])}. Recommended threshold from this measurement: "
        f"{_pct(report.recommended_threshold) if report.recommended_threshold else 'none'}.",
    ]
    if report.collect_s:
        lines += ["", f"Measured in {report.collect_s / 60:.1f} min."]
    for note in report.notes:
        lines += ["", f"**Warning:** {note}."]
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d, arg = HarnessConfig(), parser.add_argument
    arg("--quick", action="store_true", help="a tiny cell, few trials (seconds)")
    sizes = [(name, 1, what) for name, what in (("tokens", "N"), ("vocab", "V"), ("hidden", "D"))]
    counts = [("processes", 1, "worker processes"), ("runs", 2, "rounds per process")]
    for name, low, what in (*counts, ("samples", 2, "samples per run"), *sizes):
        arg(f"--{name}", type=int_between(low), help=f"{what} (default {getattr(d, name)})")
    slowdowns = "injected slowdowns, comma-separated (default 5%%,10%%)"
    arg("--slowdowns", type=lambda t: tuple(map(parse_fraction, t.split(","))), help=slowdowns)
    arg("--method", help=f"method timed (default {d.method})")
    arg("--threads", type=positive_int, help="torch threads per worker (default: torch's)")
    rule = "the rule's threshold (default: perfsuite compare's for the device)"
    arg("--time-threshold", type=parse_fraction, default=None, help=rule)
    arg("--device", choices=["cpu", "cuda"], help="default: cpu")
    arg("--alpha", type=level, default=DEFAULT_ALPHA)
    arg("--out", type=Path, help="write the raw samples and the report here (JSON)")
    arg("--reanalyse", type=Path, help="analyse a JSON written by --out instead of measuring")
    arg("--format", choices=["text", "markdown"], default="text")


def config_from_args(args: argparse.Namespace) -> HarnessConfig:
    known = {f.name for f in fields(HarnessConfig)}
    changes = {k: v for k, v in vars(args).items() if k in known and v is not None}
    cfg = replace(QUICK if args.quick else HarnessConfig(), **changes)
    method = all_methods().get(cfg.method)
    if method is None:
        raise ValueError(f"--method {cfg.method}: no such method (see `perfsuite methods`)")
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA device here (torch sees none)")
    elif method.caps.triton:
        raise ValueError(
            f"--method {cfg.method} runs Triton kernels, which run on CPU only under the "
            "interpreter (its times say nothing about a GPU): use --device cuda, or eager"
        )
    return cfg


def run(args: argparse.Namespace) -> int:
    try:
        if args.out:
            check_output_file(args.out)  # before minutes of measuring
        if args.reanalyse:
            data = read_json(args.reanalyse)
            if not isinstance(data, dict) or not isinstance(data.get("data"), dict):
                raise ValueError(
                    f"{args.reanalyse}: not a file written by `perfsuite sensitivity --out`"
                )
            data = data["data"]
        else:
            data = collect(config_from_args(args), log=lambda m: print(m, file=sys.stderr))
        report = analyse(data, threshold=args.time_threshold, alpha=args.alpha)
    except (OSError, KeyError, RuntimeError) as err:  # bad input (ValueError) is cli's
        raise ValueError(str(err)) from None
    if args.out:
        saved = {"report": report.as_dict(), "data": data}
        try:
            write_results(args.out, saved)
        except OSError as err:  # never lose a measurement: save it where we can, and say so
            fallback = Path(tempfile.gettempdir()) / f"perfsuite-sensitivity-{os.getpid()}.json"
            write_results(fallback, saved)
            print(f"perfsuite sensitivity: cannot write {args.out} ({err.strerror}); "
                  f"saved to {fallback}", file=sys.stderr)  # fmt: skip
    text = render_markdown(report)
    if args.format == "markdown":
        sys.stdout.write(text)
    else:
        from rich.markdown import Markdown

        TrimmedConsole().print(Markdown(text))
    return 0
