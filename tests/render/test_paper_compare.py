"""The paper side by side: ratios within each run, wrong cells marked."""

from __future__ import annotations

import json

import pytest
from fake_results import paper_document

from perfsuite.cli import main
from perfsuite.render.report import side_by_side

PAPER = [
    {"method": "lower_bound", "beta": "any", "fwdbwd_ms": "", "fwdbwd_mem_mb": "1161"},
    {"method": "cce", "beta": "0", "fwdbwd_ms": "50", "fwdbwd_mem_mb": "1161"},
    {"method": "ours", "beta": "0", "fwdbwd_ms": "40", "fwdbwd_mem_mb": "1161"},
    {"method": "torch_compile", "beta": "0", "fwdbwd_ms": "80", "fwdbwd_mem_mb": "8000"},
    {"method": "torch_compile", "beta": ">0", "fwdbwd_ms": "100", "fwdbwd_mem_mb": "9000"},
]


def _row(method: str, ms: float, status: str = "ok", beta: float = 0.0) -> dict:
    return {
        "method": method, "phase": "fwd+bwd", "beta": beta, "status": status,
        "median_ms": ms, "peak_bytes": 2 * (8 + 64) * 16 * 2, "tokens": 8, "vocab": 64,
        "hidden": 16, "dtype": "bf16",
    }  # fmt: skip


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("|")]


def test_ratios_within_the_run_and_marks():
    doc = {"rows": [_row("cce", 10.0, "wrong"), _row("ours", 20.0), _row("torch-compile", 5.0)]}
    lines = side_by_side(doc, PAPER).splitlines()
    assert [c.strip() for c in lines[0].split("|")][1:3] == ["paper method", "β"]
    ours = next(line for line in lines if _cells(line)[1:3] == ["ours", "0"])
    cells = _cells(ours)
    # paper ×CCE 40/50, ours ×CCE 20/10 (the note says CCE failed the gate), ×compile 20/5,
    # paper ×compile 40/80 (same β), peak/floor 2.00.
    assert cells[4:10] == ["0.80", "2.00", "0.50", "4.00", "1.00", "2.00"]
    assert "CCE wrong" in lines[-1]


def test_cli_report_paper(tmp_path, capsys):
    results = tmp_path / "r.json"
    results.write_text(json.dumps(paper_document()))
    paper = tmp_path / "paper.csv"
    paper.write_text("method,beta,fwdbwd_ms,fwdbwd_mem_mb\ncce,0,50,1161\nours,0,40,1161\n")
    assert main(["report", str(results), "--paper", str(paper)]) == 0
    # fake_results: ours 72.9 ms, CCE 80.0 ms at β = 0.
    out = capsys.readouterr().out.splitlines()
    ours = next(_cells(line) for line in out if _cells(line)[1:3] == ["ours", "0"])
    assert ours[3:6] == ["ours", "0.80", "0.91"]
    assert main(["report", str(results), "--paper", str(tmp_path / "missing.csv")]) == 2


@pytest.mark.parametrize(
    ("paper", "words"),
    [
        ("results", "not a paper table (a CSV of columns method, beta,"),
        ("method,beta\nours,0\n", "no 'fwdbwd_mem_mb' column"),
        ("method,beta,fwdbwd_mem_mb,fwdbwd_ms\nours,0,5,fast\n", "line 2: fwdbwd_ms is 'fast'"),
        (b"\xff\xfe\x00", "not a paper table"),
    ],
)
def test_another_file_as_paper_is_one_line(tmp_path, capsys, paper, words):
    """`report good.json --paper good.json` raised KeyError: 'method'."""
    results = tmp_path / "r.json"
    results.write_text(json.dumps(paper_document()))
    other = tmp_path / "paper.csv"
    if paper == "results":
        other = results
    elif isinstance(paper, bytes):
        other.write_bytes(paper)
    else:
        other.write_text(paper)
    assert main(["report", str(results), "--paper", str(other)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"error: --paper {other}: ") and words in captured.err
