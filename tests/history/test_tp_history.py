"""The TP size in the history: its own column (schema 2, migrated from 1; a schema 1 file
is read and drawn as it is), its own cells and series (on the dashboard too), and
one-device cells that keep their names."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from render.conftest import dashboard, figures

from history.histories import blocks, history, make_document
from perfsuite.history import ingest, store, timelines


def write_runs(folder: Path, n: int = 10, step_at: int = 6) -> list[Path]:
    """Each run holds ours on one device (flat) and ours at TP=2 (+30 % from ``step_at``)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        doc = make_document(i)
        doc["rows"] += make_document(i, 1.3 if i >= step_at else 1.0, seed=1, tp=2)["rows"]
        paths.append(folder / f"run-{i:02d}.json")
        paths[-1].write_text(json.dumps(doc))
    return paths


def schema1_db(path: Path, document: dict) -> str:
    """A history file as perfsuite wrote it before ``tp``: schema 1, no column; returns
    the cell's id as stored then."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(store.SCHEMA.replace("    tp INTEGER,\n", ""))
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '1')")
    run, cells = ingest.prepare(document, "old.json")
    run_id = store.insert(conn, "runs", run)
    for cell in cells:
        del cell["tp"]
        store.insert(conn, "cells", {"run_id": run_id, **cell})
    conn.commit()
    conn.close()
    return cells[0]["cell_id"]


def test_schema1_is_read_and_drawn_as_is_and_migrated_by_the_first_write(tmp_path, db, capsys):
    old_id = schema1_db(db, make_document(0))
    before = db.read_bytes()
    assert history(["list", "--db", str(db)]) == 0 and history(["check", "--db", str(db)]) == 0
    assert dashboard(["--db", str(db), "-o", str(tmp_path / "site")]) == 0
    assert (tmp_path / "site" / "shape-gemma2-2b.html").is_file()
    assert db.read_bytes() == before  # read-only commands leave it as it was
    assert "1 runs" in capsys.readouterr().out
    (tp_run,) = write_runs(tmp_path / "runs", n=1)[:1]
    assert history(["add", "--db", str(db), str(tp_run)]) == 0
    with closing(store.connect(db, create=False, write=False)) as conn:
        ((version,),) = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'")
        names = [r[1] for r in conn.execute("PRAGMA table_info(cells)")]
        assert version == "2" and "tp" in names
        stored = {(r["cell_id"], r["tp"]) for r in store.cell_rows(conn)}
    # The old cell keeps its name (acks hold it); run 0 again on one device is that cell.
    assert (old_id, None) in stored and len({c for c, tp in stored if tp is None}) == 1
    assert len({c for c, tp in stored if tp == 2}) == 1


def test_a_tp_cell_is_its_own_series_in_check_list_timelines_and_dashboard(tmp_path, db, capsys):
    assert history(["import", "--db", str(db), str(tmp_path / "runs")]) == 2  # no folder yet
    write_runs(tmp_path / "runs")
    assert history(["import", "--db", str(db), str(tmp_path / "runs")]) == 0
    capsys.readouterr()
    assert history(["check", "--db", str(db)]) == 1
    out = capsys.readouterr().out
    (regression,) = blocks(out, "REGRESSION")
    assert "Test CUDA ours TP=2 fwd" in regression and "time +30" in regression
    assert "4 series checked: 1 open regressions" in out  # {one device, TP=2} x {time, memory}
    assert history(["list", "--db", str(db)]) == 0
    assert capsys.readouterr().out.count("2 cells (TP=2)") == 10
    assert dashboard(["--db", str(db), "-o", str(tmp_path / "site")]) == 0
    page = tmp_path / "site" / "shape-gemma2-2b.html"
    (fig,) = figures(page)  # a series per method and TP size, labelled
    names = {t["name"] for t in fig["data"] if t.get("showlegend", True) is not False}
    assert {"ours", "ours TP=2"} <= names
    assert any("ours TP=2 @" in a["text"] for a in fig["layout"]["annotations"])  # the step
    assert 'data-method="ours TP=2" data-state="open"' in page.read_text()
    conn = store.connect(db, create=False, write=False)
    (groups,) = timelines.load(conn).values()
    conn.close()
    (group,) = groups  # a line per method and TP size on the one plot
    assert {(line.method, line.metric) for line in group.lines} == {
        (name, metric) for name in ("ours", "ours TP=2") for metric in ("time", "memory")
    }
    (mark,) = [m for m in group.marks if m.state == "open"]
    assert mark.method == "ours TP=2" and mark.after.position == 6


@pytest.mark.parametrize("tp", ["2", 0, True, 1.5])
def test_a_malformed_tp_is_refused(tmp_path, db, capsys, tp):
    doc = make_document(0, tp=2)
    doc["rows"][0]["tp"] = tp
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    assert history(["add", "--db", str(db), str(path)]) == 2
    err = capsys.readouterr().err  # the loader's words: the file, the row, the field
    assert err.startswith(f"error: {path}: row 0: tp is ") and err.count("\n") == 1
