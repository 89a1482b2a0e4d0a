"""The console form of ``kernel-report --baseline``: the builds that changed, fitted to the
terminal (``perfsuite.fit``), then the counts and the builds on one side only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich import box
from rich.markup import escape

from perfsuite.fit import Column, TrimmedConsole, fold, print_fitted

from .diff import Comparison

COLUMNS = (Column("build"), Column("what changed"), Column("verdict"))


def _toolchain(doc: dict[str, Any]) -> str:
    chain = doc.get("toolchain", {})
    ptxas = " / ".join(sorted(set(chain.get("ptxas", {}).values()))) or "?"
    return f"Triton {chain.get('triton', '?')} (ptxas {ptxas})"


def _plural(n: int) -> str:
    return f"{n} build{'' if n == 1 else 's'}"


def render(
    comparison: Comparison,
    baseline: dict[str, Any],
    path: Path,
    report: dict[str, Any],
    problems: list[str],
    console: Any = None,
) -> None:
    """Print ``comparison`` of this run (``report``) with the stored ``baseline``."""
    console = console or TrimmedConsole()
    shape = report["shape"]
    at = f"{shape['name']} (N={shape['n']}, V={shape['v']}, D={shape['d']})"
    console.print(f"kernel-report at {at}, threshold {comparison.threshold:.0%}", highlight=False)
    stored = fold(f"stored in {path}", console.width, path=True)
    console.print(escape(stored), highlight=False, soft_wrap=True)
    console.print(
        f"baseline: {_toolchain(baseline)}; this run: {_toolchain(report)}", highlight=False
    )
    if comparison.across:
        console.print("across Triton versions: reported, never failing", highlight=False)
    if comparison.changed:
        rows = [
            [escape(c.build), escape(", ".join(c.changes)), escape(c.verdict)]
            for c in comparison.changed
        ]
        title = (
            f"Builds whose SASS changed (fails: a new spill, fewer CTAs/SM, an instruction "
            f"class or the total up more than {comparison.threshold:.0%})"
        )
        options = dict(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
        print_fitted(console, COLUMNS, rows, title, **options)
    console.print(f"unchanged: {_plural(comparison.unchanged)} (same SASS)", highlight=False)
    failing = len(comparison.failing())
    changed = f"changed: {_plural(len(comparison.changed))}, {failing} failing"
    console.print(changed, highlight=False)
    for label, names in (
        ("only in this run", comparison.only_new),
        ("only in the baseline", comparison.only_old),
    ):
        for name in names:
            console.print(f"{label} (not gated): {escape(name)}", highlight=False)
    for note in report.get("notes", []):
        if note.startswith("CCE"):  # why CCE's stored builds are only in the baseline
            console.print(f"note: {escape(note)}", highlight=False)
    for p in problems:
        console.print(f"[red]FAIL[/red] {escape(p)}", highlight=False)
