"""The step table from made-up rows: marks in the note column, statuses in place of
numbers, the loss share, reasons numbered under the table, 80 columns."""

from __future__ import annotations

import io
from dataclasses import asdict

from rich.console import Console

from perfsuite.results.results import STEP_PHASES, Row
from perfsuite.step.table import print_step_tables

WORKLOAD = "step(layers=1,seq=256,batch=1)"


def rows(method: str, status: str = "ok", **extra) -> list[dict]:
    out = []
    for i, phase in enumerate(STEP_PHASES):
        row = Row(method, 256, 128256, 2048, "fp32", 0.0, phase, status, kind="step")
        row.shape, row.workload = "llama3.2-1b", WORKLOAD
        if status in ("ok", "wrong"):
            row.median_ms, row.peak_bytes, row.compile_ms = 1000.0 * (i + 1), 3 * 2**30, 2000.0
            row.loss_ms = 1000.0 if phase == "step" else None
        for key, value in extra.items():
            setattr(row, key, value)
        out.append(asdict(row))
    return out


def printed(all_rows: list[dict]) -> str:
    console = Console(file=io.StringIO(), width=80, color_system=None)
    print_step_tables(all_rows, console)
    return console.file.getvalue()


def test_marks_statuses_and_notes():
    text = printed(
        rows("eager")
        + rows("liger", interpreted=True, busy="other processes", loss_ms=None)
        + rows("ours", "wrong", reason="loss error 1 > tolerance 0.1")
        + rows("cce", "unavailable", reason="needs CUDA", interpreted=True)
        + rows("torch-compile", compile_ms=60_000.0)
    )
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert lines["eager"].split()[1:] == ["1,000", "2,000", "3,000", "4,000", "64", "3,072", "25"]
    assert lines["liger"].split()[7:] == ["-", "†!"]  # no loss share without its time
    assert "✗" in lines["ours"] and "(1)" in lines["ours"]
    assert "unavail" in lines["cce"] and "†" not in lines["cce"]  # nothing measured: no mark
    assert "(3)" in lines["torch-compile"]
    assert "(1) ours: wrong: loss error 1 > tolerance 0.1" in text
    assert "(3) torch-compile: first step 60.0 s (compilation" in text
    assert "! measured on a busy machine" in text and "✗ failed the correctness gate" in text
    assert max(map(len, text.splitlines())) <= 80
