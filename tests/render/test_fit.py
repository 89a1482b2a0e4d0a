"""One rule for console tables (issue 20): fit the terminal, fold text only at word
or hyphen boundaries, never cut a number or a verdict."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from perfsuite.cli import main
from perfsuite.fit import Column, fit_table, fold, pieces
from perfsuite.plan.registry import all_methods
from perfsuite.render.table import print_tables
from perfsuite.results.results import load_results

REPORTS = Path(__file__).resolve().parents[2] / "reports"
SMOKE = REPORTS / "cpu-smoke" / "results.json"


def test_fold_breaks_only_at_spaces_and_hyphens_between_letters():
    assert fold("ours-fused-no-filter", 12) == "ours-fused-\nno-filter"
    assert fold("fwd+bwd", 4) == "fwd+\nbwd"
    assert fold("24.18 → 31.22", 7) == "24.18 →\n31.22"
    assert fold("F.linear_cross_entropy with options", 10).split("\n")[0] == (
        "F.linear_cross_entropy"  # an identifier stays whole, even past the width
    )
    assert pieces("-5.0%") == ["-5.0%"] and pieces("1.2e-05") == ["1.2e-05"]


def test_a_table_that_cannot_fit_is_refused_not_cut():
    rows = [["x" * 30, "1,234,567.8"]]
    assert fit_table([Column("name"), Column("n", "right", False)], rows, 20) is None
    assert fit_table([Column("name"), Column("n", "right", False)], rows, 60) is not None


def lines_of(capsys) -> list[str]:
    captured = capsys.readouterr()
    return (captured.out + captured.err).splitlines()


def test_compare_at_80_columns_keeps_every_number_and_verdict(monkeypatch, capsys, tmp_path):
    """`COLUMNS=80 perfsuite compare a b` cut cells to f…, pea…, regress…, 24.18 → 3…"""
    monkeypatch.setenv("COLUMNS", "80")
    doc = json.loads(SMOKE.read_text())
    for row in doc["rows"]:
        if row["method"] == "eager" and row.get("samples_ms"):
            row["samples_ms"] = [x * 1.5 for x in row["samples_ms"]]
            row["median_ms"] *= 1.5
    slower = tmp_path / "slower.json"
    slower.write_text(json.dumps(doc))
    assert main(["compare", str(SMOKE), str(slower)]) == 1
    out = lines_of(capsys)
    text = "\n".join(out)
    assert max(map(len, out)) <= 80 and "…" not in text
    assert not any(line.endswith(" ") for line in out)  # issue 30: every line was 80 long
    assert re.search(r"\bregression\b", text) and "fwd+" in text
    assert text.count("interpreted: time not compared") == 2  # one note per table, not per row
    eager = next(r for r in doc["rows"] if r["method"] == "eager" and r["phase"] == "fwd")
    assert f"{eager['median_ms']:.4g}" in text  # the new time, whole


def test_run_table_folds_method_names_at_hyphens(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "34")  # a phase at a time, and still the names fold
    print_tables(load_results(SMOKE)["rows"], Console())
    out = lines_of(capsys)
    table = [line for line in out if line.startswith(" ") and line.split()]
    assert max(map(len, table)) <= 34
    names = [line.split()[0] for line in table]
    assert "torchtune-" in names and "chunked" in names  # after the hyphen
    assert "torch-" in names and "compile" in names and "native" in names
    assert not any(n in ("ed", "ked", "ile", "pile", "ive") for n in names)  # never in a word


@pytest.mark.parametrize(
    "argv",
    [
        ["methods"],
        ["methods", "--tp"],
        ["shapes"],
        ["baseline", "list", "--root", str(REPORTS / "baselines")],
        ["converge", "--render", str(REPORTS / "converge-cpu-smoke" / "smoke.json")],
    ],
)
def test_other_tables_fit_80_columns_without_cutting(monkeypatch, capsys, argv, tmp_path):
    """Issue 30 too: rich padded tables and titles to the width, so that piped to a file
    every line of a `compare` was 80 characters long."""
    monkeypatch.setenv("COLUMNS", "80")
    if argv[0] == "converge":  # --render rewrites the table beside the JSON: a copy
        copy = tmp_path / "smoke.json"
        copy.write_text(Path(argv[2]).read_text())
        argv = [*argv[:2], str(copy)]
    assert main(argv) == 0
    out = lines_of(capsys)
    text = "\n".join(out)
    # the tables; a file's path (results:, table:, plot:) stays whole on its own line
    tables = [line for line in out if not line.startswith(("results:", "table:", "plot:"))]
    assert out and max(map(len, tables)) <= 80 and "…" not in text
    assert not any(line.endswith(" ") for line in out)
    if argv == ["methods"]:
        assert "F.linear_cross_entropy" in text  # issue 20: F.linear_cross_ / entropy
        # issue 30: a folded description went on at column 0, after a dangling space
        blocks = out[out.index("methods on this machine") + 1 :]
        assert not [x for x in blocks if not x.startswith("  ") and x not in all_methods()]
        assert any(x.startswith("    ") for x in blocks)  # a folded line, indented
    elif argv[0] == "converge":  # issue 30: each held-out row was an 11-line block
        assert not any(line.startswith("  loss: ") for line in out)
        ours = [line for line in out if line.startswith("│ ours ")]
        assert len(ours) == 4 and "4.5838" in ours[0] and "2.7920" in ours[0]  # a row a line
        assert "0.0652" in ours[2] and "7.28e-04" in ours[2] and "0.264" in ours[2]
