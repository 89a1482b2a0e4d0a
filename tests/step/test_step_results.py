"""A step results file is a results file: ``compare`` and ``history add``/``check`` take
it cell by cell (``report`` refuses it: tests/render/test_report.py; a cell's workload is
part of its key: tests/regress/test_compare.py; the step phases validate:
tests/results/test_schema.py)."""

from __future__ import annotations

import copy

import pytest

from perfsuite.cli import main
from perfsuite.history import store
from perfsuite.results.results import STEP_PHASES, write_results


@pytest.mark.integration
def test_compare_reads_a_step_file_cell_by_cell_and_fails_one_gone_wrong(
    smoke_run, tmp_path, capsys
):
    path = str(smoke_run.path)
    capsys.readouterr()
    assert main(["compare", path, path, "--accept-busy"]) == 0
    out = capsys.readouterr().out
    assert "step(layers=1,seq=4,batch=1)" in out and " opt " in out and " step " in out
    assert "same" in out and "Traceback" not in out
    current = copy.deepcopy(smoke_run.document)
    for row in current["rows"]:
        if row["method"] == "ours" and row["phase"] == "step":
            row["status"], row["reason"] = "wrong", "loss error 1 > tolerance 0.1"
    write_results(tmp_path / "cur.json", current)
    assert main(["compare", path, str(tmp_path / "cur.json"), "--accept-busy"]) == 1
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
