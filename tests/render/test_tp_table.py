"""The TP tables (`run --tp` cells): per rank numbers, scaling against TP=1 of the same
method, the per-rank floor, 80 columns without a cut number, and TP cells kept apart
from the one-device tables and reports."""

from __future__ import annotations

import csv
import io

import pytest
from fake_results import CPU_ENV, H100_ENV, paper_document, row, tp_document, tp_row
from rich.console import Console

from perfsuite.cli import main
from perfsuite.render.report_formats import render
from perfsuite.render.table import print_tables
from perfsuite.render.tp_table import print_tp_tables, tp_tables
from perfsuite.results.results import new_document, write_results

N, V, D = 8192, 256000, 2304


def mixed() -> dict:
    """The paper's one-device cells and TP cells in one file."""
    doc = paper_document()
    doc["rows"] += tp_document()["rows"]
    return doc


def printed(document: dict, width: int = 80) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    print_tp_tables(console, document)
    return console.file.getvalue()


def lines_of(table) -> dict[tuple[str, int], dict[str, str]]:
    keys = [next(k for k, h in table.headers.items() if h == c.header) for c in table.columns]
    return {(r[0], int(r[1])): dict(zip(keys, r, strict=True)) for r in table.rows}


def test_80_columns_hold_every_number_whole_and_narrower_ones_fold():
    doc = tp_document(methods=("torch-native", "ours", "megatron"), sizes=(1, 2, 4, 8))
    text = printed(doc, 80)
    assert max(map(len, text.splitlines())) <= 80 and "…" not in text
    table = text.split("TP K:")[0]  # the table, before the notes
    for number in ("12,346", "17.25", "3.13", "1.13", "0.58", "5.28×", "4.29×"):
        assert number in table  # 12345.6 ms, 17.25 GiB, TFLOP/s, floors, scaling
    body = [ln.split() for ln in table.splitlines() if ln.split()[:1] == ["torch-native"]]
    assert [ln[1] for ln in body] == ["1", "2", "4", "8"]  # ordered by TP within a method
    assert "max over ranks" in " ".join(text.split())
    # The colls column goes first when the terminal is narrow.
    wide = printed(doc, 120)
    assert "4, 12 MiB" in wide and "colls left out" not in wide
    assert "4, 12 MiB" not in text and "colls left out at 80 columns" in text
    tiny = printed(doc, 40)  # even folded it cannot fit: one block per line, all numbers
    assert "12,346" in tiny and "colls: 4, 3 MiB" in tiny and "…" not in tiny


def test_per_rank_and_aggregate_rates_floor_and_scaling():
    (table,) = tp_tables(tp_document()["rows"])
    assert table.phase == "fwd+bwd"
    assert table.headers["rate"] == "rank TFLOP/s" and table.headers["peak"] == "rank GiB"
    cells = lines_of(table)
    one, four = cells[("torch-native", 1)], cells[("torch-native", 4)]
    ms4 = 12345.6 / 4**0.8
    per_rank = 8 * N * V * D / 4 / (ms4 / 1e3) / 1e12  # roofline's 8NVD, a quarter a rank
    assert float(four["rate"]) == pytest.approx(per_rank, rel=5e-3)
    assert float(four["total"].replace(",", "")) == pytest.approx(4 * per_rank, rel=5e-3)
    assert one["rate"] == one["total"] == "3.13"
    # The floor is a rank's: full dE plus ceil(V/K) rows of dC, bf16.
    assert float(four["floor"]) == pytest.approx((N + V // 4) * D * 2 / 2**30, abs=0.005)
    assert float(one["floor"]) > float(cells[("ours", 2)]["floor"]) > float(four["floor"])
    assert four["speedup"] == f"{4**0.8:.2f}×" and four["memcut"] == f"{4**0.7:.2f}×"
    assert one["speedup"] == "1.00×" and four["comm"] == "12%"
    assert four["colls"] == "4, 12 MiB"


def test_cpu_tables_pick_units_that_do_not_print_zero():
    shape = dict(tokens=64, vocab=512, hidden=32, dtype="fp32", shape="smoke", device="cpu")
    rows = [tp_row("ours", k, 4.0 / k, 0.25 / 1024 / k, **shape) for k in (1, 2)]
    (table,) = tp_tables(rows)
    assert table.headers["rate"] == "rank GFLOP/s" and table.headers["peak"] == "rank MiB"
    cells = lines_of(table)[("ours", 2)]
    assert cells["peak"] == "0.12" and cells["floor"] != "0.00"
    assert float(cells["rate"]) == pytest.approx(8 * 64 * 512 * 32 / 2 / 2e-3 / 1e9, rel=5e-3)
    text = printed(new_document(CPU_ENV, rows))
    assert "GFLOP/s" in text and "0.00" not in text and "CPU run" in text


def test_status_cells_notes_and_marks():
    rows = [
        tp_row("ours", 1, 72.9, 17.25),
        tp_row("ours", 2, None, None, status="oom"),
        tp_row("cce", 2, 33.3, 2.5, status="wrong", interpreted=True, busy="3 processes"),
    ]
    rows[2]["median_ms"], rows[2]["peak_bytes"] = 33.3, int(2.5 * 2**30)
    text = printed(new_document(H100_ENV, rows), 100)
    oom = next(ln for ln in text.splitlines() if ln.split()[:3] == ["ours", "2", "oom"])
    assert oom.rstrip().endswith("(1)")
    assert "(1) ours TP=2: oom: oom on purpose" in text
    assert "33.3†!✗" in text and "(2) cce TP=2: wrong: wrong on purpose" in text
    flat = " ".join(text.split())
    assert "† Triton interpreter" in flat and "✗ failed the correctness gate" in flat
    assert "! measured on a busy machine" in flat and "‡" not in flat


def test_without_fwd_bwd_the_measured_phase_is_used():
    rows = [tp_row("ours", k, 10.0 / k, 1.0, phase="fwd") for k in (1, 2)]
    (table,) = tp_tables(rows)
    assert table.phase == "fwd" and "fwd across ranks" in table.title
    rate = lines_of(table)[("ours", 2)]["rate"]
    assert float(rate) == pytest.approx(2 * N * V * D / 2 / 5e-3 / 1e12, rel=5e-3)  # 2NVD
    assert table.headers["floor"] == "floor GiB"  # the peaks' unit: 32 KiB is "<0.01"
    assert lines_of(table)[("ours", 2)]["floor"] == "<0.01"  # N fp32 losses


def test_a_one_device_cell_is_never_the_tp1_reference():
    rows = [row("ours", "fwd+bwd", ms=72.9, mib=1164), tp_row("ours", 2, 41.9, 10.0)]
    (table,) = tp_tables(rows)
    assert [r[:2] for r in table.rows] == [["ours", "2"]]
    assert lines_of(table)[("ours", 2)].get("speedup", "") == ""


def test_one_device_tables_leave_tp_cells_out_and_say_so():
    doc = mixed()
    console = Console(width=200, file=io.StringIO(), color_system=None)
    print_tables(doc["rows"], console)
    text = console.file.getvalue()
    assert "torch-native" not in text  # a TP-only method: none of its cells here
    assert "6 cells measured across ranks (TP=1,2,4) are left out" in text
    assert "12,346" not in text
    assert printed(doc).count("fwd+bwd across ranks") == 1  # and they are there


def test_reports_carry_the_tp_cells_or_say_they_are_left_out(tmp_path, capsys):
    path = write_results(tmp_path / "r.json", mixed())
    assert main(["report", str(path)]) == 0
    md = capsys.readouterr().out
    assert "| torch-native | 4 |" in md and "fwd+bwd across ranks" in md
    assert "4, 12 MiB" in md  # no terminal to fit: every column
    paper = md.split("fwd+bwd across ranks")[0]
    assert "torch-native" not in paper.split("left out of these tables")[0]
    assert main(["report", str(path), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    tp = [r for r in rows if r["tp"]]
    assert len(tp) == 6 and all(r["tp"] == "" for r in rows if r not in tp)
    four = next(r for r in tp if (r["method"], r["tp"]) == ("torch-native", "4"))
    assert float(four["fwdbwd_ms"]) == pytest.approx(12345.6 / 4**0.8, rel=1e-5)
    assert float(four["fwdbwd_floor_mib"]) == pytest.approx((N + V // 4) * D * 2 / 2**20)
    assert float(four["fwdbwd_gflop"]) == pytest.approx(8 * N * V * D / 4 / 1e9)
    assert four["fwdbwd_collectives"] == "4" and float(four["fwdbwd_collective_mib"]) == 12
    assert four["fwdbwd_roofline_ms"] == ""
    for fmt in ("latex", "html"):  # tables of one device only: the TP cells said left out
        out = render(mixed(), fmt)
        assert "torch-native" not in out and "left out of these tables" in out


def test_reports_of_one_device_files_are_unchanged_but_for_the_tp_column():
    text = render(paper_document(), "md")
    assert "across ranks" not in text and "TP" not in text
    rows = list(csv.DictReader(io.StringIO(render(paper_document(), "csv"))))
    assert all(r["tp"] == "" for r in rows) and "fwdbwd_collectives" not in rows[0]
