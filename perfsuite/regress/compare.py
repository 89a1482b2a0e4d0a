"""``perfsuite compare BASELINE CURRENT``: cell-by-cell regression verdicts
(``verdicts`` has the rule), exit 1 on a regression; BASELINE may be a stored-baselines folder."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from perfsuite.args import level
from perfsuite.measure.machine import refuse_busy
from perfsuite.regress.baseline_store import stored_baseline
from perfsuite.regress.compare_report import print_table, render_markdown
from perfsuite.regress.verdicts import (
    DEFAULT_ALPHA,
    DEFAULT_MEMORY_THRESHOLD,
    DEFAULT_TIME_THRESHOLDS,
    METRICS,
    CompareError,
    Settings,
    compare_documents,
)
from perfsuite.results.kinds import TIMED_KINDS
from perfsuite.results.results import ResultsError, document_kinds, load_results, require_kind


def parse_fraction(text: str) -> float:
    """``5%`` -> 0.05, ``0.05`` -> 0.05; a bare number above 1 is refused as ambiguous."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a threshold: {text!r} (e.g. 5% or 0.05)") from None
    if value > 1 and not raw.endswith("%"):
        raise argparse.ArgumentTypeError(f"{text!r} is ambiguous: write {raw}% or {value / 100:g}")
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"threshold must be >= 0, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "baseline",
        type=Path,
        help="baseline results file, or a stored-baselines folder (e.g. reports/baselines): "
        "the file of CURRENT's device and shape(s) is used",
    )
    parser.add_argument("current", type=Path, help="results file to check")
    parser.add_argument(
        "--time-threshold",
        type=parse_fraction,
        default=None,
        help="smallest slowdown that counts, e.g. 5%% (default: "
        + ", ".join(f"{v:.0%}% on {k}" for k, v in DEFAULT_TIME_THRESHOLDS.items())
        + ", measured: see the README)",
    )
    parser.add_argument(
        "--memory-threshold",
        type=parse_fraction,
        default=DEFAULT_MEMORY_THRESHOLD,
        help=f"smallest peak-memory growth that counts (default {DEFAULT_MEMORY_THRESHOLD:.0%}%)",
    )
    parser.add_argument("--metric", choices=METRICS, default="median", help="time statistic")
    parser.add_argument(
        "--alpha",
        type=level,
        default=DEFAULT_ALPHA,
        help=f"significance level of the one-sided U test (default {DEFAULT_ALPHA:g})",
    )
    parser.add_argument(
        "--allow-env-mismatch",
        action="store_true",
        help="compare even if device or library versions differ",
    )
    parser.add_argument(
        "--accept-busy",
        action="store_true",
        help="judge time even if either run was measured on a busy machine",
    )
    parser.add_argument("--format", choices=["table", "markdown"], default="table")
    parser.add_argument(
        "--all", action="store_true", help="markdown: list unchanged cells in the main table too"
    )


def load_pair(
    baseline: Path, current: Path
) -> tuple[dict[str, Any], dict[str, Any], str, list[str]]:
    """(baseline document, current document, baseline label, notes)."""
    current_doc = load_results(current)
    # A missing path without a file suffix is a baseline store not made yet (a fresh
    # clone's reports/baselines on a new device), not a missing results file; unless it
    # is not named like a store (`compare r1 r2.json` said no baseline was stored).
    missing_store = not baseline.exists() and not baseline.suffix
    if missing_store and "baseline" not in baseline.name.lower():
        raise ResultsError(
            f"{baseline} does not exist (neither a results file nor a stored-baselines folder)"
        )
    if baseline.is_dir() or missing_store:
        doc, paths, missing = stored_baseline(baseline, current_doc)
        notes = [f"no stored baseline for shape {s}: its cells show as new" for s in missing]
        return doc, current_doc, ", ".join(str(p) for p in paths), notes
    return load_results(baseline), current_doc, str(baseline), []


def check_kinds(base: dict[str, Any], cur: dict[str, Any], labels: tuple[str, str]) -> None:
    """One line, before any verdict, for files compare cannot judge against each other."""
    for doc, label in zip((base, cur), labels, strict=True):
        require_kind(doc, label, TIMED_KINDS, "compare")
    kinds = document_kinds(base), document_kinds(cur)
    if all(kinds) and not kinds[0] & kinds[1]:
        pairs = zip(labels, kinds, strict=True)
        named = [f"{label} holds {' and '.join(sorted(k))} rows" for label, k in pairs]
        raise CompareError(f"{', '.join(named)}: cells of different kinds are never compared")


def run(args: argparse.Namespace) -> int:
    """``perfsuite compare``: 0 no regression, 1 regression(s); unusable input raises."""
    settings = Settings(**{f.name: getattr(args, f.name) for f in fields(Settings)})
    base_doc, cur_doc, base_label, notes = load_pair(args.baseline, args.current)
    labels = (base_label, str(args.current))
    check_kinds(base_doc, cur_doc, labels)
    refusal = refuse_busy(base_doc, cur_doc, labels)
    if refusal and not args.accept_busy:
        raise CompareError(refusal)
    if refusal:
        notes.append(f"--accept-busy: {refusal.split(': a time difference')[0]}")
    comparison = compare_documents(
        base_doc, cur_doc, settings, baseline_label=base_label, current_label=labels[1]
    )
    comparison.notes.extend(notes)
    if args.format == "markdown":
        sys.stdout.write(render_markdown(comparison, show_all=args.all))
    else:
        print_table(comparison)
    return comparison.exit_code
