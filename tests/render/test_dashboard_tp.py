"""`perfsuite dashboard` with cells measured across ranks: a series per method and TP
size, labelled; a history file from before `tp` still builds, untouched."""

from __future__ import annotations

from pathlib import Path

import pytest
from history.histories import history, make_document
from history.test_tp_history import schema1_db, write_runs

from render.conftest import dashboard
from render.test_dashboard import figures

pytest.importorskip("plotly")


def test_series_are_keyed_by_tp_and_labelled(tmp_path: Path) -> None:
    db, out = tmp_path / "h.sqlite", tmp_path / "site"
    write_runs(tmp_path / "runs")
    assert history(["import", "--db", str(db), str(tmp_path / "runs")]) == 0
    assert dashboard(["--db", str(db), "-o", str(out)]) == 0
    page = out / "shape-gemma2-2b.html"
    (fig,) = figures(page)
    names = {t["name"] for t in fig["data"] if t.get("showlegend", True) is not False}
    assert {"ours", "ours TP=2"} <= names
    assert any("ours TP=2 @" in a["text"] for a in fig["layout"]["annotations"])  # the step
    assert 'data-method="ours TP=2" data-state="open"' in page.read_text()


def test_a_schema1_history_builds_and_stays_as_it_was(tmp_path: Path) -> None:
    db, out = tmp_path / "old" / "h.sqlite", tmp_path / "site"
    schema1_db(db, make_document(0))
    before = db.read_bytes()
    assert dashboard(["--db", str(db), "-o", str(out)]) == 0
    assert db.read_bytes() == before and (out / "shape-gemma2-2b.html").is_file()
