"""``perfsuite sensitivity``: how often the regression detector of ``perfsuite
compare`` cries wolf on unchanged code, and how often it catches a real
slowdown, measured on this machine.

One CPU cell (eager, fwd+bwd by default) is timed with the suite's own
protocol (``worker.Phase`` + ``measure.timing.time_samples``: warm-up, cache
flush, raw samples) in several fresh worker processes, each doing many *runs*
of three conditions in shuffled order:

* unchanged: the method as it is;
* +5 %, +10 %: the same method wrapped to do proportionally more of the same
  work: its loss plus ``0 *`` the loss over the first k tokens, so the extra
  forward and backward are the same kernels. k is calibrated in a separate
  process, and the slowdown actually injected is measured again from the data
  (paired runs of the same process and round), not assumed.

A *trial* is one ``perfsuite compare`` of two results documents of one row
each: a baseline run of the unchanged method from one process against a run of
a condition from another process (every ordered pair of processes, same round),
so that the noise between processes (memory layout, frequency, neighbours) is in
the trials, as it is between a stored baseline and a nightly run. The false-alarm
rate is the share of unchanged trials flagged ``regression``; the detection rate
the share of slowed trials flagged. The same trials are re-judged at other
thresholds, and unchanged trials with the current samples scaled by 1+δ give the
smallest slowdown caught in 95 % of trials.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from perfsuite.measure.stats import mann_whitney_greater, quantile, summarize
from perfsuite.regress.compare import parse_fraction
from perfsuite.regress.verdicts import (
    DEFAULT_ALPHA,
    DEFAULT_TIME_THRESHOLDS,
    Settings,
    classify_time,
    compare_documents,
)
from perfsuite.results.results import Row, new_document

UNCHANGED = 0.0
THRESHOLD_GRID = (0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.125, 0.15, 0.2)
SCALED_GRID = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3)
TARGET_DETECTION = 0.95
TARGET_FALSE_ALARMS = 0.01


@dataclass
class HarnessConfig:
    """The cell measured and how much of it (defaults: the README's numbers)."""

    method: str = "eager"
    tokens: int = 256
    vocab: int = 4096
    hidden: int = 256
    dtype: str = "fp32"
    beta: float = 0.0
    phase: str = "fwd+bwd"
    slowdowns: tuple[float, ...] = (0.05, 0.10)
    processes: int = 5
    runs: int = 16  # rounds per process; each round times every condition once
    samples: int = 20
    warmup: int = 3
    calibration_rounds: int = 6
    seed: int = 0
    flush: bool = True  # the suite's cache flush between samples
    threads: int | None = None  # torch intra-op threads; None: torch's default, as the suite
    device: str = "cpu"

    @property
    def conditions(self) -> list[float]:
        return [UNCHANGED, *self.slowdowns]


QUICK = HarnessConfig(
    tokens=64,
    vocab=1024,
    hidden=64,
    processes=2,
    runs=3,
    samples=10,
    warmup=1,
    calibration_rounds=2,
    flush=False,
)


# --------------------------------------------------------------------------
# Worker side (a fresh process per call, like the suite's workers)


def slowed(loss_fn: Callable, extra_tokens: int) -> Callable:
    """``loss_fn`` plus ``0 *`` its loss over the first ``extra_tokens`` tokens:
    the same kernels, forward and backward (through ``e``; ``c`` is detached so
    that the extra work has no fixed V x D gradient term), on a slice of the
    work proportional to ``extra_tokens``."""
    if extra_tokens <= 0:
        return loss_fn

    def loss(e: Any, c: Any, targets: Any) -> Any:
        k = extra_tokens
        return loss_fn(e, c, targets) + 0.0 * loss_fn(e[:k], c.detach(), targets[:k])

    return loss


class _Cell:
    def __init__(self, cfg: HarnessConfig) -> None:
        import torch

        from perfsuite.measure.timing import CacheFlusher
        from perfsuite.method import Case
        from perfsuite.plan.registry import get_method
        from perfsuite.run.inputs import make_inputs

        self.cfg = cfg
        self.device = torch.device(cfg.device)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        case = Case(cfg.tokens, cfg.vocab, cfg.hidden, cfg.dtype, cfg.beta, None, cfg.device)
        self.inputs = make_inputs(case, cfg.seed)
        self.loss_fn = get_method(cfg.method).prepare(case, self.inputs.c)
        self.flush = CacheFlusher(self.device) if cfg.flush else (lambda: None)

    def time(self, extra_tokens: int, samples: int, warmup: int) -> list[float]:
        from perfsuite.measure.timing import time_samples
        from perfsuite.run.worker import Phase

        phase = Phase(self.cfg.phase, slowed(self.loss_fn, extra_tokens), self.inputs)
        timing = time_samples(
            phase.body,
            self.device,
            samples=samples,
            warmup=warmup,
            setup=phase.setup,
            flush=self.flush,  # type: ignore[arg-type]
        )
        phase.reset()
        return timing.samples_ms


def _ratio(cell: _Cell, k: int, rounds: int, samples: int) -> float:
    """Measured slowdown of ``k`` extra tokens: median over interleaved rounds."""
    ratios = []
    for _ in range(rounds):
        base = summarize(cell.time(0, samples, 1), "median")
        slow = summarize(cell.time(k, samples, 1), "median")
        ratios.append(slow / base - 1)
    return quantile(ratios, 0.5)


def calibrate(cfg: HarnessConfig) -> dict[str, Any]:
    """Extra tokens per slowdown: a proportional guess, then two secant steps."""
    cell = _Cell(cfg)
    cell.time(0, 3, cfg.warmup)
    samples = max(5, cfg.samples // 2)
    out: dict[str, Any] = {}
    for target in cfg.slowdowns:
        points: list[tuple[int, float]] = []
        k = max(1, round(target * cfg.tokens))
        for _ in range(3):
            r = _ratio(cell, k, cfg.calibration_rounds, samples)
            points.append((k, r))
            if len(points) == 1:
                new_k = k * target / r if r > 0 else 2 * k
            else:
                (k0, r0), (k1, r1) = points[-2], points[-1]
                slope = (r1 - r0) / (k1 - k0) if k1 != k0 and r1 != r0 else r1 / k1
                new_k = k1 + (target - r1) / slope if slope > 0 else k1
            k = int(min(max(1, round(new_k)), cfg.tokens))
        out[f"{target:g}"] = {"extra_tokens": k, "steps": points}
    return out


def measure(cfg: HarnessConfig, extra: dict[str, int], proc: int) -> dict[str, list[list[float]]]:
    """``runs`` rounds, each timing every condition once in a shuffled order."""
    cell = _Cell(cfg)
    cell.time(0, 3, cfg.warmup)
    rng = random.Random(cfg.seed * 1000 + proc)
    runs: dict[str, list[list[float]]] = {f"{c:g}": [] for c in cfg.conditions}
    for _ in range(cfg.runs):
        order = list(cfg.conditions)
        rng.shuffle(order)
        for cond in order:
            k = extra.get(f"{cond:g}", 0)
            runs[f"{cond:g}"].append(cell.time(k, cfg.samples, cfg.warmup))
    return runs


def _config_from(data: dict[str, Any]) -> HarnessConfig:
    data = dict(data)
    data["slowdowns"] = tuple(data["slowdowns"])
    return HarnessConfig(**data)


def worker_main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    cfg = _config_from(spec["config"])
    if spec["mode"] == "calibrate":
        result: Any = calibrate(cfg)
    else:
        result = measure(cfg, spec["extra"], spec["proc"])
    Path(spec["out"]).write_text(json.dumps(result))
    return 0


# --------------------------------------------------------------------------
# Parent side: collect, then analyse


def _spawn(spec: dict[str, Any], tmp: Path, name: str) -> Any:
    from perfsuite.measure.memory import CPU_MALLOC_ENV

    spec = {**spec, "out": str(tmp / f"{name}.out.json")}
    path = tmp / f"{name}.spec.json"
    path.write_text(json.dumps(spec))
    cpu = spec["config"].get("device", "cpu") == "cpu"
    env = {**os.environ, **(CPU_MALLOC_ENV if cpu else {}), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "perfsuite.regress.sensitivity", "--worker", str(path)],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"sensitivity worker {name} failed ({proc.returncode}): {tail}")
    return json.loads(Path(spec["out"]).read_text())


def collect(cfg: HarnessConfig, log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Calibrate, then measure in ``cfg.processes`` fresh processes, one after the other."""
    from perfsuite.plan.registry import get_method
    from perfsuite.results.provenance import collect_env

    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    env = collect_env(cfg.device, get_method(cfg.method).distributions)
    with tempfile.TemporaryDirectory(prefix="perfsuite-sens-") as tmp:
        log("calibrating the injected slowdowns")
        calibration = _spawn({"mode": "calibrate", "config": asdict(cfg)}, Path(tmp), "cal")
        extra = {name: c["extra_tokens"] for name, c in calibration.items()}
        processes = []
        for proc in range(cfg.processes):
            log(f"process {proc + 1}/{cfg.processes}: {cfg.runs} rounds")
            spec = {"mode": "measure", "config": asdict(cfg), "extra": extra, "proc": proc}
            processes.append(_spawn(spec, Path(tmp), f"p{proc}"))
    return {
        "config": asdict(cfg),
        "env": env,
        "calibration": calibration,
        "extra_tokens": extra,
        "processes": processes,  # [proc][condition] -> [run] -> samples_ms
        "collect_s": time.perf_counter() - started,
        "load": {"before": load_before, "after": os.getloadavg()[0], "cores": os.cpu_count()},
    }


def rate_bounds(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a rate k/n (95 %)."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


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


def _doc(cfg: dict[str, Any], env: dict[str, Any], samples: Sequence[float]) -> dict[str, Any]:
    row = Row(
        method=cfg["method"],
        tokens=cfg["tokens"],
        vocab=cfg["vocab"],
        hidden=cfg["hidden"],
        dtype=cfg["dtype"],
        beta=cfg["beta"],
        phase=cfg["phase"],
        status="ok",
        device=cfg.get("device", "cpu"),
        shape="sensitivity",
        samples_ms=list(samples),
        median_ms=summarize(samples, "median"),
    )
    return new_document(env, [row])


def analyse(
    data: dict[str, Any],
    threshold: float | None = None,
    alpha: float = DEFAULT_ALPHA,
    metric: str = "median",
) -> Report:
    """Rates at ``threshold`` (default: compare's default for the device) and a sweep."""
    cfg = data["config"]
    if threshold is None:
        threshold = DEFAULT_TIME_THRESHOLDS.get(cfg.get("device", "cpu"), 0.05)
    procs = data["processes"]
    conditions = [UNCHANGED, *cfg["slowdowns"]]
    n_proc, n_runs = len(procs), len(procs[0][f"{UNCHANGED:g}"])
    pairs = _pairs(n_proc, n_runs)
    settings = Settings(time_threshold=threshold, alpha=alpha, metric=metric)
    base_runs = {
        (p, r): procs[p][f"{UNCHANGED:g}"][r] for p in range(n_proc) for r in range(n_runs)
    }

    def current(cond: float, b: int, r: int, a: int) -> list[float]:
        runs = procs[b][f"{cond:g}"]
        return runs[(r + 1) % n_runs] if n_proc == 1 else runs[r]

    # Per trial: ratio and both p-values, once; the verdict of compare_documents.
    trials: dict[float, list[tuple[float, float, float]]] = {}
    rates = []
    for cond in conditions:
        stats, flagged = [], 0
        for a, b, r in pairs:
            base, cur = base_runs[(a, r)], current(cond, b, r, a)
            verdict = compare_documents(
                _doc(cfg, data["env"], base), _doc(cfg, data["env"], cur), settings
            ).cells[0]
            flagged += verdict.verdict == "regression"
            ratio = summarize(cur, metric) / summarize(base, metric)
            stats.append((ratio, mann_whitney_greater(cur, base), mann_whitney_greater(base, cur)))
        trials[cond] = stats
        injected = None
        if cond != UNCHANGED:  # paired: same process, same round
            ratios = [
                summarize(procs[p][f"{cond:g}"][r], "median")
                / summarize(base_runs[(p, r)], "median")
                for p in range(n_proc)
                for r in range(n_runs)
            ]
            injected = quantile(ratios, 0.5) - 1
        rates.append(Rate(cond, injected, flagged, len(pairs)))

    def rate_at(cond: float, t: float) -> float:
        s = trials[cond]
        return sum(classify_time(x, ps, pf, t, alpha) == "regression" for x, ps, pf in s) / len(s)

    sweep = []
    for t in sorted({*THRESHOLD_GRID, threshold}):
        entry = {"threshold": t, "false_alarms": rate_at(UNCHANGED, t)}
        for cond in cfg["slowdowns"]:
            entry[f"detected_{cond:g}"] = rate_at(cond, t)
        sweep.append(entry)

    scaled = []
    for delta in SCALED_GRID:
        hits = 0
        for a, b, r in pairs:
            base = base_runs[(a, r)]
            cur = [x * (1 + delta) for x in current(UNCHANGED, b, r, a)]
            ratio = summarize(cur, metric) / summarize(base, metric)
            p = mann_whitney_greater(cur, base)
            hits += classify_time(ratio, p, 1.0, threshold, alpha) == "regression"
        scaled.append({"slowdown": delta, "detected": hits / len(pairs)})
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
        settings={"threshold": threshold, "alpha": alpha, "metric": metric},
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
    smallest = min(slowdowns) if slowdowns else None
    key = f"detected_{smallest:g}"
    good = [s["threshold"] for s in quiet if smallest is not None and s[key] >= TARGET_DETECTION]
    if good:
        return good[(len(good) - 1) // 2]
    return min(s["threshold"] for s in quiet)


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


# --------------------------------------------------------------------------
# Rendering and the command


def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}%}"


def render_markdown(report: Report) -> str:
    cfg, s = report.config, report.settings
    lines = [
        f"Cell: `{cfg['method']}` {cfg['phase']}, N={cfg['tokens']} V={cfg['vocab']} "
        f"D={cfg['hidden']} {cfg['dtype']}, {cfg['samples']} samples per run "
        f"(median {report.noise['median_ms']:.3g} ms); {cfg['processes']} processes × "
        f"{cfg['runs']} rounds = {report.independent_runs} runs per condition; a trial compares "
        f"runs of two different processes. Rule: {s['metric']} ratio ≥ "
        f"{1 + s['threshold']:.3g}× and one-sided Mann-Whitney p < {s['alpha']:g}.",
        "",
        "| condition | injected (measured) | flagged `regression` | rate | 95% CI |",
        "|---|---|---|---|---|",
    ]
    for r in report.rates:
        name = "unchanged (false alarms)" if r.condition == 0 else f"+{r.condition:.0%} slower"
        lo, hi = r.bounds
        lines.append(
            f"| {name} | {_pct(r.injected)} | {r.flagged}/{r.trials} | {_pct(r.rate)} | "
            f"{_pct(lo)}–{_pct(hi)} |"
        )
    heads = [f"caught +{c:.0%}" for c in cfg["slowdowns"]]
    lines += [
        "",
        "| threshold | false alarms | " + " | ".join(heads) + " |",
        "|---|---|" + "---|" * len(heads),
    ]
    for row in report.sweep:
        mark = " (default)" if math.isclose(row["threshold"], s["threshold"]) else ""
        cells = [_pct(row[f"detected_{c:g}"]) for c in cfg["slowdowns"]]
        lines.append(
            f"| {row['threshold']:.1%}{mark} | {_pct(row['false_alarms'])} | "
            + " | ".join(cells)
            + " |"
        )
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
    d = HarnessConfig()
    parser.add_argument("--quick", action="store_true", help="a tiny cell, few trials (seconds)")
    parser.add_argument("--processes", type=int, help=f"worker processes (default {d.processes})")
    parser.add_argument("--runs", type=int, help=f"rounds per process (default {d.runs})")
    parser.add_argument("--samples", type=int, help=f"samples per run (default {d.samples})")
    parser.add_argument(
        "--slowdowns", default=None, help="injected slowdowns, comma-separated (default 5%%,10%%)"
    )
    parser.add_argument("--method", help=f"method timed (default {d.method})")
    parser.add_argument("--threads", type=int, help="torch threads per worker (default: torch's)")
    parser.add_argument("--tokens", type=int, help=f"N (default {d.tokens})")
    parser.add_argument("--vocab", type=int, help=f"V (default {d.vocab})")
    parser.add_argument("--hidden", type=int, help=f"D (default {d.hidden})")
    parser.add_argument(
        "--time-threshold",
        type=parse_fraction,
        default=None,
        help="the rule's threshold (default: perfsuite compare's for the device)",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], help="default: cpu")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    parser.add_argument("--out", type=Path, help="write the raw samples and the report here (JSON)")
    parser.add_argument(
        "--reanalyse", type=Path, help="analyse a JSON written by --out instead of measuring"
    )
    parser.add_argument("--format", choices=["text", "markdown"], default="text")


def config_from_args(args: argparse.Namespace) -> HarnessConfig:
    cfg = QUICK if args.quick else HarnessConfig()
    changes: dict[str, Any] = {
        k: getattr(args, k)
        for k in (
            "processes",
            "runs",
            "samples",
            "method",
            "tokens",
            "vocab",
            "hidden",
            "threads",
            "device",
        )
        if getattr(args, k) is not None
    }
    if args.slowdowns:
        changes["slowdowns"] = tuple(parse_fraction(x) for x in args.slowdowns.split(","))
    cfg = replace(cfg, **changes)
    if cfg.processes < 1 or cfg.runs < 2 or cfg.samples < 2:
        raise ValueError("need --processes >= 1, --runs >= 2 and --samples >= 2")
    return cfg


def run(args: argparse.Namespace) -> int:
    try:
        if args.reanalyse:
            data = json.loads(Path(args.reanalyse).read_text())["data"]
        else:
            cfg = config_from_args(args)
            data = collect(cfg, log=lambda m: print(m, file=sys.stderr, flush=True))
        report = analyse(data, threshold=args.time_threshold, alpha=args.alpha)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        print(f"perfsuite sensitivity: error: {err}", file=sys.stderr)
        return 2
    if args.out:
        from perfsuite.results.results import write_results

        write_results(args.out, {"report": report.as_dict(), "data": data})
    text = render_markdown(report)
    if args.format == "markdown":
        sys.stdout.write(text)
    else:
        from rich.console import Console
        from rich.markdown import Markdown

        Console().print(Markdown(text))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--worker":
        return worker_main(argv[1])
    parser = argparse.ArgumentParser(prog="perfsuite sensitivity", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
