"""``perfsuite sensitivity``: how often ``compare``'s detector cries wolf on unchanged code
here and how often it catches a real +5 % or +10 % slowdown, trials comparing runs of two
different processes (docs/regressions.md; ``sensitivity_collect``, ``sensitivity_analyse``)."""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import fields, replace
from pathlib import Path

from perfsuite.args import int_between, level, positive_int
from perfsuite.fit import pipe_table
from perfsuite.parser import print_error
from perfsuite.regress.compare import parse_fraction
from perfsuite.regress.sensitivity_analyse import SCALED_GRID, Report, analyse
from perfsuite.regress.sensitivity_collect import QUICK, HarnessConfig, collect
from perfsuite.regress.verdicts import DEFAULT_ALPHA


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
    d = HarnessConfig()
    parser.add_argument("--quick", action="store_true", help="a tiny cell, few trials (seconds)")
    sizes = [(name, 1, what) for name, what in (("tokens", "N"), ("vocab", "V"), ("hidden", "D"))]
    counts = [("processes", 1, "worker processes"), ("runs", 2, "rounds per process")]
    for name, low, what in (*counts, ("samples", 2, "samples per run"), *sizes):
        help_text = f"{what} (default {getattr(d, name)})"
        parser.add_argument(f"--{name}", type=int_between(low), help=help_text)
    parser.add_argument(
        "--slowdowns",
        type=lambda text: tuple(parse_fraction(x) for x in text.split(",")),
        help="injected slowdowns, comma-separated (default 5%%,10%%)",
    )
    parser.add_argument("--method", help=f"method timed (default {d.method})")
    parser.add_argument(
        "--threads", type=positive_int, help="torch threads per worker (default: torch's)"
    )
    parser.add_argument(
        "--time-threshold",
        type=parse_fraction,
        default=None,
        help="the rule's threshold (default: perfsuite compare's for the device)",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], help="default: cpu")
    parser.add_argument("--alpha", type=level, default=DEFAULT_ALPHA)
    parser.add_argument("--out", type=Path, help="write the raw samples and the report here (JSON)")
    parser.add_argument(
        "--reanalyse", type=Path, help="analyse a JSON written by --out instead of measuring"
    )
    parser.add_argument("--format", choices=["text", "markdown"], default="text")


def config_from_args(args: argparse.Namespace) -> HarnessConfig:
    cfg = QUICK if args.quick else HarnessConfig()
    known = {f.name for f in fields(HarnessConfig)}
    changes = {k: v for k, v in vars(args).items() if k in known and v is not None}
    cfg = replace(cfg, **changes)
    from perfsuite.plan.registry import all_methods

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
    from perfsuite.results.results import check_writable, read_json, write_results

    try:
        if args.out:
            check_writable(args.out, overwrite=True)  # before minutes of measuring
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
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        print_error(err)
        return 2
    if args.out:
        saved = {"report": report.as_dict(), "data": data}
        try:
            write_results(args.out, saved)
        except OSError as err:  # never lose a measurement: save it where we can, and say so
            import tempfile

            fallback = Path(tempfile.gettempdir()) / f"perfsuite-sensitivity-{os.getpid()}.json"
            write_results(fallback, saved)
            print(f"perfsuite sensitivity: cannot write {args.out} ({err.strerror}); "
                  f"saved to {fallback}", file=sys.stderr)  # fmt: skip
    text = render_markdown(report)
    if args.format == "markdown":
        sys.stdout.write(text)
    else:
        from rich.markdown import Markdown

        from perfsuite.fit import TrimmedConsole as Console

        Console().print(Markdown(text))
    return 0
