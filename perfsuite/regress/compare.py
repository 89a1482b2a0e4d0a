"""``perfsuite compare BASELINE CURRENT`` (a file or a stored-baselines folder): verdicts per
cell, exit 1 on a regression, as a console table or markdown for ``$GITHUB_STEP_SUMMARY``."""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from rich.text import Text

from perfsuite.args import level
from perfsuite.fit import (
    BOX,
    Column,
    Grid,
    Notes,
    TrimmedConsole,
    fit_table,
    fold,
    md_escape,
    pipe_table,
)
from perfsuite.measure.machine import refuse_busy
from perfsuite.measure.stats import summarize
from perfsuite.regress.baseline_store import stored_baseline
from perfsuite.regress.verdicts import (
    DEFAULT_ALPHA,
    DEFAULT_MEMORY_THRESHOLD,
    DEFAULT_TIME_THRESHOLDS,
    METRICS,
    VERDICTS,
    CellComparison,
    CompareError,
    Comparison,
    Settings,
    compare_documents,
    method_label,
)
from perfsuite.results.kinds import TIMED_KINDS
from perfsuite.results.results import ResultsError, document_kinds, load_results, require_kind
from perfsuite.units import SHORT_STATUS, fmt_bytes


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
    arg = parser.add_argument
    store = "baseline results file, or a stored-baselines folder (e.g. reports/baselines): "
    arg("baseline", type=Path, help=store + "the file of CURRENT's device and shape(s) is used")
    arg("current", type=Path, help="results file to check")
    measured = ", ".join(f"{v:.0%}% on {k}" for k, v in DEFAULT_TIME_THRESHOLDS.items())
    slower = f"smallest slowdown that counts, e.g. 5%% (default: {measured}, measured: "
    arg("--time-threshold", type=parse_fraction, default=None, help=slower + "see the README)")
    grown = f"smallest peak-memory growth that counts (default {DEFAULT_MEMORY_THRESHOLD:.0%}%)"
    arg("--memory-threshold", type=parse_fraction, default=DEFAULT_MEMORY_THRESHOLD, help=grown)
    arg("--metric", choices=METRICS, default="median", help="time statistic")
    test = f"significance level of the one-sided U test (default {DEFAULT_ALPHA:g})"
    arg("--alpha", type=level, default=DEFAULT_ALPHA, help=test)
    mismatch = "compare even if device or library versions differ"
    arg("--allow-env-mismatch", action="store_true", help=mismatch)
    busy = "judge time even if either run was measured on a busy machine"
    arg("--accept-busy", action="store_true", help=busy)
    arg("--format", choices=["table", "markdown"], default="table")
    arg("--all", action="store_true", help="markdown: list unchanged cells in the main table too")


def load_pair(
    baseline: Path, current: Path
) -> tuple[dict[str, Any], dict[str, Any], str, list[str]]:
    """(baseline document, current document, baseline label, notes)."""
    current_doc = load_results(current)
    # A missing suffix-less path named like a store is one not made yet (a fresh clone on a
    # new device), not a missing results file (`compare r1 r2.json` said no baseline stored).
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


def run(args: argparse.Namespace) -> int:
    """``perfsuite compare``: 0 no regression, 1 regression(s); unusable input raises."""
    settings = Settings(**{f.name: getattr(args, f.name) for f in fields(Settings)})
    base_doc, cur_doc, base_label, notes = load_pair(args.baseline, args.current)
    labels = (base_label, str(args.current))
    # One line, before any verdict, for files compare cannot judge against each other.
    for doc, label in zip((base_doc, cur_doc), labels, strict=True):
        require_kind(doc, label, TIMED_KINDS, "compare")
    kinds = document_kinds(base_doc), document_kinds(cur_doc)
    if all(kinds) and not kinds[0] & kinds[1]:
        pairs = zip(labels, kinds, strict=True)
        named = [f"{label} holds {' and '.join(sorted(k))} rows" for label, k in pairs]
        raise CompareError(f"{', '.join(named)}: cells of different kinds are never compared")
    refusal = refuse_busy(base_doc, cur_doc, labels)
    if refusal and not args.accept_busy:
        raise CompareError(refusal)
    if refusal:
        notes.append(f"--accept-busy: {refusal.split(': a time difference')[0]}")
    comparison = compare_documents(base_doc, cur_doc, settings, *labels)
    comparison.notes.extend(notes)
    if args.format == "markdown":
        sys.stdout.write(render_markdown(comparison, show_all=args.all))
    else:
        print_table(comparison)
    return 1 if comparison.failures else 0


# Per verdict: its console style and its markdown icon.
LOOK = {
    "regression": ("bold red", "🔴"),
    "status-changed": ("bold red", "🔴"),
    "missing": ("yellow", "🟡"),
    "improvement": ("green", "🟢"),
    "new": ("cyan", "🆕"),
    "same": ("dim", "⚪"),
}
REFRESH_HINT = "refresh the stored baseline: `perfsuite baseline update RESULTS`"


def fmt_spec(value: float | None, spec: str, unit: str = "") -> str:
    """``value`` formatted, or ``-`` when there is none."""
    return "-" if value is None or not math.isfinite(value) else f"{value:{spec}}{unit}"


def cell_label(row: dict[str, Any]) -> list[str]:
    shape = row.get("shape") or f"N={row['tokens']} V={row['vocab']} D={row['hidden']}"
    softcap = row.get("softcap")
    beta = f"{row['beta']:g}" + ("" if softcap is None else f" cap {softcap:g}")
    if row.get("workload") not in (None, "", "random"):
        shape = f"{shape} {Path(row['workload']).name}"
    return [method_label(row["method"], row.get("tp")), shape, row["dtype"], beta, row["phase"]]


def _time(row: dict[str, Any], metric: str) -> float | None:
    if row.get("status") != "ok":
        return None
    samples = row.get("samples_ms") or []
    return summarize(samples, metric) if samples else row.get("median_ms")


def _values(cell: CellComparison, metric: str, short: bool = False) -> list[str]:
    b, c = cell.baseline or {}, cell.current or {}
    status = [row.get("status", "-") for row in (b, c)]
    p = cell.time.p_slower
    small = p is not None and p < 1e-3  # 7e-12, not 7.3e-12
    return [
        _arrow(*(SHORT_STATUS.get(s, s) if short else s for s in status)),
        fmt_spec(_time(b, metric), ".4g"),
        fmt_spec(_time(c, metric), ".4g"),
        fmt_spec(cell.time.ratio, ".3f", "×"),
        fmt_spec(p, ".0e" if small else ".2g"),
        fmt_bytes(b.get("peak_bytes"), "MiB"),
        fmt_bytes(c.get("peak_bytes"), "MiB"),
        fmt_spec(cell.memory.ratio, ".3f", "×"),
    ]


HEADERS = [*"method shape dtype β phase status".split(), "base ms", "cur ms", "time ×"]
HEADERS += ["p(slower)", "base MiB", "cur MiB", "mem ×", "verdict", "note"]


def summary_line(comparison: Comparison) -> str:
    counts = [f"{comparison.count(v)} {v}" for v in VERDICTS if comparison.count(v)]
    return ", ".join(counts) or "no cells"


def settings_line(comparison: Comparison) -> str:
    s = comparison.settings
    if s.time_threshold is not None:
        threshold = f"{s.time_threshold:.3g}"
    else:
        devices = sorted({c.row.get("device", "cpu") for c in comparison.cells} or {"cuda"})
        threshold = ", ".join(f"{s.threshold_for(d):.3g} ({d})" for d in devices)
    return (
        f"time: {s.metric} ratio ≥ 1 + {threshold} and one-sided Mann-Whitney "
        f"p < {s.alpha:g}; memory: peak growth > {s.memory_threshold:.1%}"
    )


def _arrow(before: str, after: str) -> str:
    return before if before == after else f"{before} → {after}"


def _row(cell: CellComparison, metric: str, notes: Notes) -> list[str]:
    """A cell's console line; its notes go under the table, numbered (the columns stay narrow)."""
    status, base_ms, cur_ms, time_x, p, base_mib, cur_mib, mem_x = _values(cell, metric, True)
    style, fails = LOOK[cell.verdict][0], " ✗" if cell.failing else ""
    ref = notes.ref("; ".join(cell.notes)) if cell.notes else ""
    times, sizes = _arrow(base_ms, cur_ms), _arrow(base_mib, cur_mib)
    verdict = f"[{style}]{cell.verdict}{fails}[/{style}] {ref}".rstrip()
    # the method without its TP size: the title has it
    return [cell.row["method"], cell.row["phase"], status, times, time_x, p, sizes, mem_x, verdict]


def relative(label: str) -> str:
    """Each path of a label (a store's: ``x.json, y.json``) relative to here where shorter."""
    paths = label.split(", ")
    return ", ".join(min(p, os.path.relpath(p), key=len) if os.path.isabs(p) else p for p in paths)


def _elide(text: str, width: int) -> str:
    """``text`` in ``width`` characters, its middle "…" (the end, a file's name, keeps more)."""
    if len(text) <= width:
        return text
    keep = max(width - 1, 2)
    head = keep // 3
    return f"{text[:head]}…{text[len(text) - (keep - head) :]}"


def title_lines(comparison: Comparison, width: int) -> list[str]:
    """``baseline → current`` on one line: as given, relative, else the file names (elided if
    they must be) with the whole paths below, folded at their slashes."""
    base, cur = comparison.baseline_label, comparison.current_label
    for b, c in ((base, cur), (relative(base), relative(cur))):
        if len(b) + 3 + len(c) <= width:
            return [f"{b} → {c}"]
    b, c = (", ".join(Path(p).name or p for p in label.split(", ")) for label in (base, cur))
    if len(b) + 3 + len(c) > width:
        room = max(width - 3, 8)
        b = _elide(b, min(len(b), max(room // 2, room - len(c))))
        c = _elide(c, room - len(b))
    lines = [f"{b} → {c}"]
    for name, label in (("baseline", base), ("current", cur)):
        lines += fold(f"{name}: {label}", width, path=True).split("\n")
    return lines


def print_table(comparison: Comparison) -> None:
    """One table per (shape, dtype, β, TP size), all folded alike (as one table of every row)."""
    console = TrimmedConsole()  # the terminal's width, $COLUMNS, else 80: the tables fold to fit
    metric = comparison.settings.metric
    for i, line in enumerate(title_lines(comparison, console.width)):
        console.print(Text(line, style="bold" if i == 0 else "dim"))
    groups: dict[str, list[CellComparison]] = {}
    for cell in comparison.cells:  # a table per shape, dtype, β and TP size
        _, shape, dtype, beta, _ = cell_label(cell.row)
        tp = cell.row.get("tp")
        across = "" if tp is None else f", TP={tp} (across {tp} ranks)"
        groups.setdefault(f"{shape} {dtype} β={beta}{across}", []).append(cell)
    # "3.725 → 5.643" never folds (a number pair); the verdict carries its note's number (a
    # column of its own cost 4 characters).
    numbers = (f"{metric} ms", "time ×", "p", "peak MiB", "mem ×")
    columns = [Column("method"), Column("phase"), Column("status"), Column("verdict")]
    columns[3:3] = [Column(h, "right", fold=False) for h in numbers]
    notes = {title: Notes() for title in groups}
    rows = {t: [_row(c, metric, notes[t]) for c in cells] for t, cells in groups.items()}
    joint = fit_table(columns, [row for group in rows.values() for row in group], console.width,
                      **BOX)  # fmt: skip
    # Each group's cells as the table of every row folds them: one layout for all.
    folded = joint and zip(*(list(c.cells) for c in joint.columns), strict=True)
    for title, group in rows.items():
        mine = [list(next(folded)) for _ in group] if folded else group
        Grid(columns, mine, title, [f"  {n}" for n in notes[title].lines()], BOX).print(console)
    for line in comparison.env_problems:
        console.print(f"[yellow]environment differs (allowed):[/yellow] {line}")
    for line in [*comparison.env_warnings, *comparison.notes]:
        console.print(f"[dim]note:[/dim] {line}")
    console.print(settings_line(comparison), style="dim")
    failures = len(comparison.failures)
    said = f"[bold red]FAIL[/bold red]: {failures} failing cell(s); " if failures else ""
    console.print((said or "[green]OK[/green]: ") + summary_line(comparison))
    if comparison.count("improvement"):
        console.print(f"[green]improvements[/green]: {REFRESH_HINT}")


def _md_table(cells: list[CellComparison], metric: str) -> list[str]:
    rows = []
    for cell in cells:
        fails = " **(fails)**" if cell.failing else ""
        verdict = f"{LOOK[cell.verdict][1]} {cell.verdict}{fails}"
        rows.append([*cell_label(cell.row), *_values(cell, metric), verdict, "; ".join(cell.notes)])
    return pipe_table(HEADERS, rows, left=[*HEADERS[:6], "verdict", "note"])


def render_markdown(comparison: Comparison, *, show_all: bool = False) -> str:
    head = "❌ regression" if comparison.failures else "✅ no regression"
    lines = [
        f"### perfsuite compare: {head}",
        "",
        f"`{comparison.baseline_label}` → `{comparison.current_label}`: "
        f"{summary_line(comparison)}.",
        "",
        f"_{settings_line(comparison)}._",
        "",
    ]
    if comparison.count("improvement"):
        lines += [f"> **{comparison.count('improvement')} improvement(s)**: {REFRESH_HINT}", ""]
    said = [f"> ⚠️ environment differs (allowed): {md_escape(x)}" for x in comparison.env_problems]
    said += [f"> note: {md_escape(x)}" for x in [*comparison.env_warnings, *comparison.notes]]
    lines += [*said, ""] if said else []
    shown = [c for c in comparison.cells if show_all or c.verdict != "same"]
    rest = [c for c in comparison.cells if c not in shown]
    if shown:
        lines += [*_md_table(shown, comparison.settings.metric), ""]
    if rest:
        lines += [f"<details><summary>{len(rest)} unchanged cell(s)</summary>", ""]
        lines += [*_md_table(rest, comparison.settings.metric), "", "</details>", ""]
    return "\n".join(lines)
