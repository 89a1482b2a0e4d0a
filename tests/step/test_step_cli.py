"""``perfsuite step`` through ``perfsuite.cli.main``: every method gated and measured on
the smoke model, statuses where a method cannot run, skipped by the estimate with nothing
lost, bad input refused in one line (a dead worker: tests/harness/test_lifecycle.py)."""

from __future__ import annotations

import math
import re

import pytest

from perfsuite.results.results import STEP_PHASES
from step.stepping import HERE, step

MEASURED = ("eager", "ours", "liger", "one-file")  # one-file: tests/plugins/


@pytest.mark.integration
def test_every_method_gets_every_case_and_passes_its_gate(smoke_run):
    assert smoke_run.code == 0, smoke_run.out
    rows = smoke_run.rows(shape="smoke")
    # 6 methods x β in {0, 0.1} x 4 phases, in method, β, phase order
    assert len(rows) == 6 * 2 * 4
    assert [r["phase"] for r in rows[:4]] == list(STEP_PHASES)
    statuses = {(r["method"], r["beta"]): r["status"] for r in rows}
    assert len(statuses) == len({(r["method"], r["beta"], r["status"]) for r in rows})
    assert statuses == {
        **{(m, b): "ok" for m in MEASURED for b in (0.0, 0.1)},
        ("torchtune-chunked", 0.0): "ok", ("torchtune-chunked", 0.1): "unsupported",
        ("cce", 0.0): "unavailable", ("cce", 0.1): "unavailable",
    }, [r["reason"] for r in rows if r["status"] != "ok"]  # fmt: skip
    tune = smoke_run.rows(shape="smoke", method="torchtune-chunked", beta=0.1)
    cce = smoke_run.rows(shape="smoke", method="cce")
    assert "label smoothing" in tune[0]["reason"] and "CUDA" in cce[0]["reason"]
    for row in smoke_run.rows(shape="smoke", status="ok"):  # each within its gate's bounds
        bounds = row["tolerance"]
        assert row["loss_err"] <= bounds["loss"]
        assert row["grad_e_err"] <= bounds["grad_e"] and row["grad_c_err"] <= bounds["grad_c"]
    eager = smoke_run.rows(shape="smoke", method="eager", beta=0.0)[0]
    assert eager["loss_err"] == 0.0  # eager is the fp32 reference itself


@pytest.mark.integration
def test_rows_carry_the_model_and_the_step_and_its_phases_add_up(smoke_run):
    assert {r["kind"] for r in smoke_run.document["rows"]} == {"step"}  # skipped ones too
    for row in smoke_run.rows(shape="smoke"):
        assert (row["tokens"], row["vocab"], row["hidden"]) == (4, 2048, 128)
        assert row["workload"] == "step(layers=1,seq=4,batch=1)"
        assert row["device"] == "cpu" and row["dtype"] == "fp32"
    for row in smoke_run.rows(shape="smoke", status="ok"):
        # the one protocol: an interpreted step gets one CPU-clock sample
        assert len(row["samples_ms"]) == (1 if row["interpreted"] else 2)
        assert row["median_ms"] > 0
        assert row["peak_bytes"] > 0 and row["compile_ms"] > 0
        assert row["interpreted"] == (row["method"] == "liger")
    for method in MEASURED:  # the phases add up to the step
        by_phase = {r["phase"]: r for r in smoke_run.rows(shape="smoke", method=method, beta=0.0)}
        for i, total in enumerate(by_phase["step"]["samples_ms"]):
            parts = sum(by_phase[p]["samples_ms"][i] for p in ("fwd", "bwd", "opt"))
            assert math.isclose(parts, total, rel_tol=1e-9), method
        # the step's peak is above the weights and AdamW state: at least the gradients
        assert by_phase["step"]["peak_bytes"] >= 4 * 672128 * 0.9
        loss_ms = by_phase["step"]["loss_ms"]
        assert loss_ms is not None and 0 <= loss_ms <= by_phase["step"]["median_ms"]
        assert all(by_phase[p]["loss_ms"] is None for p in ("fwd", "bwd", "opt"))


@pytest.mark.integration
def test_a_model_over_the_memory_limit_is_skipped_and_nothing_is_lost(smoke_run):
    big = smoke_run.rows(shape="llama3.2-1b")
    # cce is unavailable here and torchtune cannot smooth: decided before any estimate
    measurable = [r for r in big if r["method"] in MEASURED or r["beta"] == 0]
    assert {r["status"] for r in measurable if r["method"] != "cce"} == {"skipped"}
    reason = smoke_run.rows(shape="llama3.2-1b", method="eager")[0]["reason"]
    assert "GiB" in reason and "AdamW" in reason and "--memory-limit" in reason
    assert (big[0]["vocab"], big[0]["hidden"]) == (128256, 2048)  # the real vocabulary
    assert smoke_run.rows(shape="smoke", method="eager", status="ok")
    est = smoke_run.document["env"]["step"]["memory_estimates"]["llama3.2-1b"]["fp32"]
    assert est["eager"]["need"] > 2 * 2**30 > est["eager"]["weights"]


@pytest.mark.integration
def test_the_console_table_fits_80_columns(smoke_run):
    out = smoke_run.out
    assert "smoke step(layers=1,seq=4,batch=1): N=4 V=2048 D=128 fp32, β=0 on cpu" in out
    assert "tok/s" in out and "loss" in out and "unavail" in out and "N/A" in out
    assert "†" in out and "Triton interpreter" in out
    assert "skipped" in out and "Traceback" not in out
    # The results path stays whole on its line (the terminal folds it), however deep
    # pytest's folder is (issue 46); everything else fits.
    assert max(len(line) for line in out.splitlines() if not line.startswith("results: ")) <= 80


@pytest.mark.integration
def test_progress_lines_while_workers_run(smoke_run):
    """The README's llama3.2-1b step printed its header alone for 7 minutes (issue 46):
    a line per worker and case start, with the case's predicted peak, as `run` says."""
    out = " ".join(smoke_run.out.split())
    for method in set(MEASURED) - set(HERE):  # a worker each
        assert f"{method}: worker starting (2 cell(s) to measure)" in out
    started = re.findall(r"smoke N=4 fp32 β=0(?:\.1)?: started \(cell (\d+) of (\d+); peak ~", out)
    total = {int(n) for _, n in started}
    assert len(total) == 1 and sorted(int(i) for i, _ in started) == list(range(1, total.pop() + 1))
    assert "llama3.2-1b N=4" not in out  # its cases were decided (skipped): no worker, no line


def test_all_skipped_exits_1_and_keeps_the_file(tmp_path):
    out = tmp_path / "r.json"
    ran = step(["--model", "llama3.2-1b", "--methods", "eager", "--memory-limit", "1G"], out)
    assert ran.code == 1 and ran.err == "error: no case was measured (8 skipped)\n"
    assert {r["status"] for r in ran.document["rows"]} == {"skipped"}


def test_an_existing_out_file_is_refused_before_anything_runs(tmp_path):
    (out := tmp_path / "r.json").write_text("{}")
    ran = step(["--methods", "eager"], out)
    assert ran.code == 2 and "--force" in ran.err and out.read_text() == "{}"
