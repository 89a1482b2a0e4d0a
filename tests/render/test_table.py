"""The console table: paper layout, lower bound, N/A, status words, footnotes."""

from __future__ import annotations

from dataclasses import asdict

import pytest
from fake_results import paper_document
from rich.console import Console

from perfsuite.plan.registry import all_methods
from perfsuite.render.cells import cell_marks, grads_in_forward, measured
from perfsuite.render.table import footnotes, loss_grids, print_tables
from perfsuite.results.results import PHASES, Row
from perfsuite.units import fmt_number


def _rows():
    shape = dict(tokens=8, vocab=16, hidden=4, dtype="fp32", softcap=None, shape="t", device="cpu")
    rows = []
    for beta in (0.0, 0.1):
        for phase in ("fwd", "bwd", "fwd+bwd"):
            cell = dict(kind="loss", beta=beta, phase=phase, **shape)
            rows.append(Row("eager", status="ok", median_ms=2.0, peak_bytes=3 << 20, **cell))
            rows.append(Row("torch-native", status="ok", median_ms=1.0, peak_bytes=1 << 20, **cell))
            fake = "unsupported" if beta else "oom"
            rows.append(Row("fake", status=fake, reason="because", **cell))
    return [asdict(r) for r in rows]


def _render(rows) -> str:
    console = Console(width=250, record=True)
    print_tables(rows, console)
    return console.export_text()


def test_one_table_per_beta_with_lower_bound_first():
    tables = loss_grids(_rows())
    assert len(tables) == 2
    headers = [c.header.replace("\n", " ") for c in tables[0].columns]
    assert headers[:7] == ["method", *(f"{p} {u}" for p in PHASES for u in ("MiB", "ms"))]


def test_statuses_marks_and_numbered_reasons_under_each_table():
    """Issue 36: a blank line parts a table from the last one's notes (the second
    table's title began on the line after them)."""
    text = _render(_rows())
    assert text.index("lower bound") < text.index("eager")  # the lower bound first
    assert "N/A" in text and "oom" in text and "because" in text
    assert " 2 " in text and " 3.00 " in text  # units are in the headers
    assert "‡" in text  # torch-native computes grads in forward
    assert any("fair column" in n for n in footnotes(_rows()))
    tables = loss_grids(_rows())
    assert tables[0].notes == ["(1) fake: oom: because"]
    assert tables[1].notes == ["(1) fake: unsupported: because"]
    lines = text.splitlines()
    fake_line = next(line for line in lines if line.startswith(" fake"))
    assert "(1)" in fake_line and "because" not in fake_line
    second = next(i for i, line in enumerate(lines) if "β=0.1 " in line)
    assert lines[second - 1].strip() == ""
    assert lines[second - 2].startswith("(1) fake: oom: because")
    assert not lines[0].strip() == "" and "β=0 " in lines[0]  # none before the first


def test_fallback_path_at_smoothing_is_not_marked_grads_in_forward():
    """torch's chunked path computes gradients in forward only at β = 0; at β > 0 it
    falls back to plain autograd on full logits, whose fwd/bwd split is comparable."""
    console = Console(width=120, record=True)
    print_tables(_rows(), console)
    native = [line for line in console.export_text().splitlines() if "torch-native" in line]
    assert len(native) == 2  # β = 0 table first, then β = 0.1
    assert "‡" in native[0] and "‡" not in native[1]
    only_smoothed = [r for r in _rows() if r["beta"] > 0]
    assert not any("fair column" in n for n in footnotes(only_smoothed))


def test_wrong_cells_are_timed_marked_and_never_best():
    rows = _rows()
    for r in rows:
        if r["method"] == "torch-native":
            r["status"], r["reason"] = "wrong", "grad_e error 3e-07 > tolerance 1e-07"
    text = _render(rows)
    native = next(line for line in text.splitlines() if line.startswith(" torch-native"))
    assert native.rstrip().endswith("1✗  (1)")  # fwd+bwd still timed, with the mark
    assert any("failed the correctness gate" in n for n in footnotes(rows))


def _cells(rows) -> list[str]:
    """Every number the console table shows, as it shows it (units in the headers)."""
    known = all_methods()
    out = []
    for r in rows:
        if not measured(r):
            continue
        marks = cell_marks(r, r["phase"], grads_in_forward(r["method"], known, r["beta"]))
        out += [fmt_number(r["peak_bytes"], 2**20), fmt_number(r["median_ms"], 1) + marks]
    return out


@pytest.mark.parametrize("width", [80, 60])
def test_narrow_consoles_keep_every_number_whole(width):
    """At 80 columns (a pipe, a CI log) rich used to cut numbers to "1,58…" and headers
    to "fwd+b…"; names may fold and a table too wide goes one phase at a time, but
    every number and mark is printed whole."""
    rows = paper_document()["rows"]
    for r in rows:  # the widest cells: thousands with every mark
        if r["method"] == "liger" and r["status"] == "ok":
            r["median_ms"], r["peak_bytes"], r["interpreted"] = 12345.0, 99_999 << 20, True
        if r["method"] == "eager" and r["beta"] > 0:
            r["status"], r["reason"] = "wrong", "loss error 1 > tolerance 0.1"
    console = Console(width=width, record=True)
    print_tables(rows, console)
    text = console.export_text()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    words = set(text.split())
    missing = [cell for cell in _cells(rows) if cell not in words]
    assert missing == [] and "12,345‡†" in words and "fwd+bwd" in words
