"""A step results file is a results file: ``compare``, ``history add``/``check`` and
``report`` take it, step cells never match loss-only cells of the same N, V, D, and
the step phases validate while anything else is still refused."""

from __future__ import annotations

import copy
from dataclasses import asdict

import pytest

from perfsuite.cli import main
from perfsuite.history import store
from perfsuite.regress.verdicts import CompareError, compare_documents
from perfsuite.results.results import (
    PHASES,
    STEP_PHASES,
    ResultsError,
    Row,
    load_results,
    new_document,
    write_results,
)


@pytest.mark.integration
def test_compare_reads_a_step_file_cell_by_cell(smoke_run, capsys):
    path = str(smoke_run.path)
    capsys.readouterr()
    assert main(["compare", path, path, "--accept-busy"]) == 0
    out = capsys.readouterr().out
    assert "step(layers=1,seq=4,batch=1)" in out and " opt " in out and " step " in out
    assert "same" in out and "Traceback" not in out


@pytest.mark.integration
def test_compare_fails_a_step_cell_that_went_wrong(smoke_run, tmp_path, capsys):
    current = copy.deepcopy(smoke_run.document)
    for row in current["rows"]:
        if row["method"] == "ours" and row["phase"] == "step":
            row["status"], row["reason"] = "wrong", "loss error 1 > tolerance 0.1"
    write_results(tmp_path / "cur.json", current)
    argv = ["compare", str(smoke_run.path), str(tmp_path / "cur.json"), "--accept-busy"]
    assert main(argv) == 1
    assert "status-changed" in capsys.readouterr().out


@pytest.mark.integration
def test_history_stores_every_step_cell(smoke_run, tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    assert main(["history", "add", str(smoke_run.path), "--db", str(db)]) == 0
    assert f"{len(smoke_run.document['rows'])} cells)" in capsys.readouterr().out
    conn = store.connect(db)
    phases = {row[0] for row in conn.execute("SELECT DISTINCT phase FROM cells")}
    workloads = {row[0] for row in conn.execute("SELECT DISTINCT workload FROM cells")}
    assert phases == set(STEP_PHASES)
    assert "step(layers=1,seq=4,batch=1)" in workloads
    assert main(["history", "check", "--db", str(db)]) == 0


@pytest.mark.integration
def test_report_refuses_a_step_file_in_one_line(smoke_run, capsys):
    """It used to drop the opt and step phases and divide the loss's FLOPs by the
    model's forward time: another kind's file is said to be one."""
    assert main(["report", str(smoke_run.path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: {smoke_run.path} holds step rows; report takes loss or tp rows"]


def _cell(workload: str, phase: str, kind: str = "step") -> dict:
    row = Row("eager", 16, 2048, 128, "fp32", 0.0, phase, "ok", median_ms=1.0, kind=kind)
    row.workload = workload
    return asdict(row)


@pytest.mark.integration
def test_a_step_cell_never_matches_a_loss_only_cell_of_the_same_shape(smoke_run):
    env = smoke_run.document["env"]
    loss_only = new_document(env, [_cell("random", p, "loss") for p in PHASES])
    steps = new_document(env, [_cell("step(layers=1,seq=16,batch=1)", p) for p in STEP_PHASES])
    with pytest.raises(CompareError, match="nothing to compare.*workload"):
        compare_documents(loss_only, steps)


def test_step_phases_validate_and_others_do_not(tmp_path):
    for phase in STEP_PHASES:
        Row("eager", 1, 2, 3, "fp32", 0.0, phase, "ok", kind="step")
    with pytest.raises(ValueError, match="phase 'optimizer'"):
        Row("eager", 1, 2, 3, "fp32", 0.0, "optimizer", "ok", kind="step")
    assert PHASES == ("fwd", "bwd", "fwd+bwd")  # run's phases and --phases are unchanged
    doc = new_document({}, [_cell("step(layers=1,seq=16,batch=1)", "opt")])
    doc["rows"][0]["loss_ms"] = float("nan")
    write_results(tmp_path / "bad.json", doc)
    with pytest.raises(ResultsError, match="loss_ms is nan"):
        load_results(tmp_path / "bad.json")
