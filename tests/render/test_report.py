"""perfsuite report: the paper's table in md, LaTeX, CSV and HTML, with analytic columns."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from fake_results import CPU_ENV, paper_document, row

from perfsuite.cli import main
from perfsuite.render.report import side_by_side
from perfsuite.render.report_formats import render
from perfsuite.render.roofline import GPUS, identify_gpu, phase_flops, roofline_ms
from perfsuite.results.results import new_document, write_results

N, V, D = 8192, 256000, 2304


def test_roofline_follows_math_md():
    assert phase_flops("fwd", N, V, D) == pytest.approx(9.66e12, rel=1e-3)  # "≈ 9.7 TFLOP"
    h100 = GPUS["H100 SXM"]
    assert roofline_ms("fwd", N, V, D, "bf16", h100) == pytest.approx(9.77, abs=0.01)
    assert roofline_ms("fwd+bwd", N, V, D, "bf16", h100) == pytest.approx(39.06, abs=0.01)
    # Tiny hidden size: bandwidth-bound instead.
    assert roofline_ms("bwd", 8, 10**6, 1, "fp32", h100) == pytest.approx(
        2 * (8 + 10**6) * 4 / 3.35e12 * 1e3
    )


def test_identifies_known_gpus():
    known = {
        "NVIDIA H100 80GB HBM3": "H100 SXM", "NVIDIA H100 PCIe": "H100 PCIe",
        "NVIDIA H100 NVL": "H100 NVL", "NVIDIA H200": "H200 SXM",
        "NVIDIA A100-SXM4-80GB": "A100 SXM 80GB", "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB",
        "NVIDIA A100-SXM4-40GB": "A100 40GB",
    }  # fmt: skip
    assert {name: identify_gpu(name).name for name in known} == known
    assert identify_gpu("NVIDIA GeForce RTX 4090") is None


@pytest.fixture
def results(tmp_path):
    """paper_document() in a results file."""
    path = tmp_path / "r.json"
    path.write_text(json.dumps(paper_document()))
    return path


def _md_cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def _md_rows(text: str) -> dict[tuple[str, str], list[str]]:
    """(β section, method) -> cells of the markdown table."""
    out, beta = {}, None
    for line in text.splitlines():
        if not line.startswith("| ") or line.startswith("| β"):
            continue
        cells = _md_cells(line)
        beta = cells[0] or beta
        out[(beta, cells[1].strip("*"))] = cells[2:]
    return out


def test_markdown_paper_layout_with_roofline():
    text = render(paper_document(), "md")
    assert text.count("### gemma2-2b") == 1  # one table, β as sections
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("| β"))
    header = _md_cells(lines[at])
    assert header[:5] == ["β", "method", "fwd mem", "fwd time", "fwd % roofline"]
    assert len(header) == 2 + 3 * 3
    # A pipe table (fit.pipe_table): names left, numbers right-aligned.
    align = _md_cells(lines[at + 1])
    assert align[0].startswith(":") and all(a.endswith(":") for a in align[2:])
    rows = _md_rows(text)
    assert list(rows)[0] == ("0", "lower bound")  # β = 0 first, as the console table
    bound = rows[("0", "lower bound")]
    # Memory floor (math.md), roofline time on the H100 datasheet, FLOPs per phase.
    assert bound[:3] == ["0.03 MiB", "9.77 ms", "9.66 TFLOP"]
    assert bound[6:9] == ["1,161 MiB", "39.1 ms", "38.7 TFLOP"]
    ours = rows[("0", "ours")]
    assert ours[6:9] == ["**1,164 MiB**", "**72.9 ms**", "**54%**"]  # best, and 39.1 / 72.9
    assert ours[1] == "**24.2 ms**"  # liger's fwd is faster but does the backward too (‡)
    assert rows[("0", "liger")][1] == "150 ms‡"
    # Its fwd/bwd do other work than the phase's FLOPs count: no roofline share there.
    assert rows[("0", "liger")][2] == "" and rows[("0", "liger")][5] == ""
    assert rows[("0", "liger")][8].endswith("%")  # fwd+bwd is comparable
    assert rows[("0", "eager")][6] == "28,000 MiB"  # with units
    assert rows[("0.1", "cce")][0] == "N/A"
    assert rows[("0", "cce")][6] == "**1,164 MiB**"  # ties are all marked
    assert "mean token entropy β=0: 2.00 nats, β=0.1: 2.00 nats" in text
    assert "roofline on H100 SXM" in text


def test_latex_is_booktabs_with_bold_best_and_escaped_marks():
    text = render(paper_document(), "latex")
    assert text.count("\\begin{tabular}") == 1 and "\\toprule" in text and "\\bottomrule" in text
    assert "\\multicolumn{3}{c}{fwd+bwd}" in text
    assert "\\textbf{72.9 ms}" in text and "150 ms$^\\ddagger$" in text
    assert "\\textit{lower bound}" in text and " N/A " in text
    # β sections: one label each, a booktabs \midrule between them (no \cline).
    assert "$\\beta = 0$ & \\textit{lower bound}" in text and "$\\beta = 0.1$ &" in text
    assert "\\cline" not in text
    body = text.split("\\begin{tabular}")[1].split("\\bottomrule")[0]
    assert body.count("\\midrule") == 2  # under the header, between the two sections
    assert "\\% roofline" in text and "54\\%" in text
    assert "‡" not in text.split("% roofline on")[0].replace("$^\\ddagger$", "")


def test_html_page():
    text = render(paper_document(), "html")
    assert text.count("<table") == 1
    by_class: dict[str, list[str]] = {}  # the data cells' text by class
    for classes, cell in re.findall(r'<td [^>]*class="([^"]*)"[^>]*>([^<]*)</td>', text):
        for cls in classes.split():
            by_class.setdefault(cls, []).append(cell)
    # Best cells carry the "best" class, which the page's style sheet makes bold.
    assert "72.9 ms" in by_class["best"] and "1.10 MiB" in by_class["best"]
    assert "150 ms‡" not in by_class["best"]
    assert "td.best { font-weight: bold; }" in text
    assert "1,161 MiB" in by_class["bound"]  # the lower-bound row
    assert "N/A" in text and 'colspan="3">fwd+bwd<' in text and "lower bound" in text
    assert 'rowspan="5">β = 0<' in text  # one β label per section


def test_csv_spells_out_every_number():
    rows = list(csv.DictReader(io.StringIO(render(paper_document(), "csv"))))
    assert len(rows) == 2 * 5  # two β sections x (lower bound + 4 methods)
    by = {(r["beta"], r["method"]): r for r in rows}
    bound = by[("0.0", "lower_bound")]
    assert float(bound["fwd_floor_mib"]) == pytest.approx(8192 * 4 / 2**20)
    assert float(bound["fwdbwd_roofline_ms"]) == pytest.approx(39.06, abs=0.01)
    ours = by[("0.0", "ours")]
    assert float(ours["fwdbwd_ms"]) == 72.9 and float(ours["fwdbwd_mem_mib"]) == 1164
    assert float(ours["fwdbwd_roofline_frac"]) == pytest.approx(39.06 / 72.9, abs=1e-3)
    assert float(ours["fwdbwd_gflop"]) == pytest.approx(8 * N * V * D / 1e9)
    assert "fwdbwd_time" in ours["best"].split(";")
    assert by[("0.1", "cce")]["fwd_status"] == "N/A" and by[("0.1", "cce")]["fwd_ms"] == ""
    assert by[("0.0", "liger")]["fwd_marks"] == "‡"
    assert ours["gpu"] == "H100 SXM" and ours["entropy_nats"] == "2.0000"


def test_cpu_results_get_flop_rates_not_roofline():
    doc = paper_document(CPU_ENV)
    text = render(doc, "md")
    assert "fwd FLOP/s" in text and "% roofline" not in text
    ours = _md_rows(text)[("0", "ours")]
    assert ours[8] == "**530 TFLOP/s**"  # 8 N V D / 72.9 ms
    rows = list(csv.DictReader(io.StringIO(render(doc, "csv"))))
    assert all(r["fwd_roofline_ms"] == "" for r in rows)


def test_command_infers_format_from_suffix_and_force_overwrites(results, tmp_path, capsys):
    tex = tmp_path / "t.tex"
    tex.write_text("another file\n")  # --force writes over it (never over an input, below)
    assert main(["report", str(results), "-o", str(tex), "--force"]) == 0
    assert tex.read_text().startswith("% perfsuite report")
    assert main(["report", str(results), "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("shape,tokens")


def test_a_negative_peak_is_refused_never_bolded_as_best(tmp_path, capsys):
    """`report` used to bold a negative peak_bytes as the column's best."""
    doc = paper_document()
    doc["rows"][0]["peak_bytes"] = -(5 << 20)
    results = tmp_path / "r.json"
    results.write_text(json.dumps(doc))
    assert main(["report", str(results)]) == 2
    captured = capsys.readouterr()
    assert "peak_bytes is -5242880" in " ".join(captured.err.split()) and captured.out == ""


def test_every_row_that_prints_the_best_is_bold(tmp_path, capsys):
    """Issue 20: bold went by exact bytes, so one of five rows printing 1.17 MiB was bold."""
    rows = []
    for i, method in enumerate(["eager", "ours", "ours-no-sort", "cce", "torch-compile"]):
        peak_mib = 1.17 + i * 1e-4  # differs in bytes, prints alike
        rows.append(row(method, "fwd", ms=10.0 + i, mib=peak_mib, beta=0.0))
    path = write_results(tmp_path / "r.json", new_document(CPU_ENV, rows))
    assert main(["report", str(path)]) == 0
    text = capsys.readouterr().out
    assert text.count("**1.17 MiB**") == 5 and "ties all bold" in text
    assert text.count("**10 ms**") == 1 and "**11 ms**" not in text  # one best stays one


@pytest.mark.parametrize(
    ("out", "extra", "words"),
    [
        ("r.json", [], "-o {d}/r.json: is an input; give another file name"),
        ("r.json", ["--force"], "-o {d}/r.json: is an input; give another file name"),
        ("same/../r.json", ["--force"], "-o {d}/same/../r.json: is an input"),
        ("old.md", [], "-o {d}/old.md: exists; pass --force to overwrite it"),
        ("p.csv", ["--paper", "{d}/p.csv", "--force"], "-o {d}/p.csv: is an input"),
    ],
)
def test_report_never_writes_over_an_input_nor_unasked_over_a_file(
    results, tmp_path, capsys, out, extra, words
):
    before = results.read_bytes()
    (tmp_path / "same").mkdir()
    (tmp_path / "old.md").write_text("kept\n")
    (tmp_path / "p.csv").write_text("kept\n")
    argv = ["report", str(results), "-o", str(tmp_path / out)]
    assert main(argv + [a.format(d=tmp_path) for a in extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: " + words.format(d=tmp_path)) and err.count("\n") == 1
    assert results.read_bytes() == before
    assert (tmp_path / "old.md").read_text() == (tmp_path / "p.csv").read_text() == "kept\n"


@pytest.mark.parametrize("command", ["report", "plot"])
def test_a_step_file_is_refused_in_one_line(tmp_path, capsys, command):
    """`report step.json` dropped the opt and step phases and divided the loss's FLOPs
    by the model's forward time; `plot` said "nothing to plot"."""
    doc = paper_document()
    doc["rows"] = [
        {**r, "kind": "step", "workload": "step(tiny)"} for r in doc["rows"] if r["phase"] == "fwd"
    ]
    step = tmp_path / "step.json"
    step.write_text(json.dumps(doc))
    before = step.read_bytes()
    out = ["-o", str(tmp_path / "out")]
    assert main([command, str(step), *out]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err == f"error: {step} holds step rows; {command} takes loss or tp rows\n"
    assert step.read_bytes() == before and not (tmp_path / "out").exists()


# --paper: the paper side by side, ratios within each run, wrong cells marked.

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


def test_ratios_within_the_run_and_marks():
    doc = {"rows": [_row("cce", 10.0, "wrong"), _row("ours", 20.0), _row("torch-compile", 5.0)]}
    lines = side_by_side(doc, PAPER).splitlines()
    assert _md_cells(lines[0])[:2] == ["paper method", "β"]
    cells = next(_md_cells(line) for line in lines if _md_cells(line)[:2] == ["ours", "0"])
    # paper ×CCE 40/50, ours ×CCE 20/10 (the note says CCE failed the gate), ×compile 20/5,
    # paper ×compile 40/80 (same β), peak/floor 2.00.
    assert cells[3:9] == ["0.80", "2.00", "0.50", "4.00", "1.00", "2.00"]
    assert "CCE wrong" in lines[-1]


def test_cli_report_paper(results, tmp_path, capsys):
    paper = tmp_path / "paper.csv"
    paper.write_text("method,beta,fwdbwd_ms,fwdbwd_mem_mb\ncce,0,50,1161\nours,0,40,1161\n")
    assert main(["report", str(results), "--paper", str(paper)]) == 0
    # fake_results: ours 72.9 ms, CCE 80.0 ms at β = 0.
    out = capsys.readouterr().out.splitlines()
    ours = next(_md_cells(line) for line in out if _md_cells(line)[:2] == ["ours", "0"])
    assert ours[2:5] == ["ours", "0.80", "0.91"]


@pytest.mark.parametrize(
    ("paper", "words"),
    [
        ("results", "not a paper table (a CSV of columns method, beta,"),
        ("method,beta\nours,0\n", "no 'fwdbwd_mem_mb' column"),
        ("method,beta,fwdbwd_mem_mb,fwdbwd_ms\nours,0,5,fast\n", "line 2: fwdbwd_ms is 'fast'"),
        (b"\xff\xfe\x00", "not a paper table"),
    ],
)
def test_another_file_as_paper_is_one_line(results, tmp_path, capsys, paper, words):
    """`report good.json --paper good.json` raised KeyError: 'method'."""
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
