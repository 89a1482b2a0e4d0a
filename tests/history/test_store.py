"""Adding results to the history: idempotent, all or nothing, corrupt files refused."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from history.histories import committed_reports, count, history, make_document, write_history
from perfsuite.cli import main as perfsuite
from perfsuite.history import ingest, store


def test_add_is_idempotent(tmp_path: Path, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (path,) = write_history(tmp_path, [1.0])
    assert history(["add", "--db", str(db), str(path)]) == 0
    assert history(["add", "--db", str(db), str(path)]) == 0
    # The same document re-indented under another name is the same run.
    copy = tmp_path / "copy.json"
    copy.write_text(json.dumps(json.loads(path.read_text()), indent=4))
    assert history(["add", "--db", str(db), str(copy)]) == 0
    assert count(db, "runs") == 1 and count(db, "cells") == 1
    assert capsys.readouterr().out.count("already stored") == 2
    # Databases made before version 2 hold a v1 file's hash of its content (write_history's
    # files are v1): the kind that reading adds to each row must not change it.
    conn = store.connect(db)
    stored = [run.content_hash for run in store.list_runs(conn)]
    conn.close()
    assert stored == [store.content_hash(json.loads(path.read_text()))]


def _bad_row() -> str:
    document = make_document(0)
    document["rows"].append({**document["rows"][0], "median_ms": "fast"})
    return json.dumps(document)


@pytest.mark.parametrize(
    "text",
    ['{"schema_version": 1, "env": {}, "rows": [', "[1, 2]", '{"schema_version": 7}', "",
     _bad_row()],  # a bad row refuses the whole file
    ids=["truncated", "a-list", "schema-7", "empty", "bad-row"],
)  # fmt: skip
def test_corrupt_file_refused_and_nothing_stored(
    tmp_path: Path, db: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    assert history(["add", "--db", str(db), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "bad.json" in err
    assert not db.parent.exists()  # not even an empty database (issue 30)


def test_failure_mid_insert_leaves_nothing(
    tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    document = make_document(0)
    document["rows"] = [dict(document["rows"][0], method=f"m{k}") for k in range(5)]
    cells, real = itertools.count(), store.insert

    def crash_on_third(conn, table, values):  # type: ignore[no-untyped-def]
        if table == "cells" and next(cells) == 2:
            raise RuntimeError("power cut")
        return real(conn, table, values)

    monkeypatch.setattr(store, "insert", crash_on_third)
    conn = store.connect(db)
    with pytest.raises(RuntimeError, match="power cut"):  # two cells were in
        ingest.add_document(conn, document, "crash.json")
    conn.close()
    assert count(db, "runs") == 0 and count(db, "cells") == 0
    monkeypatch.undo()
    conn = store.connect(db)
    assert not ingest.add_document(conn, document, "again.json").duplicate
    conn.close()
    assert count(db, "runs") == 1 and count(db, "cells") == 5


def test_import_repo_reports(tmp_path: Path, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = committed_reports(tmp_path / "copy")
    files = ingest.results_files(reports)
    results = [p for p in files if ingest.looks_like_results(p)]
    assert len(results) >= 5
    assert history(["import", "--db", str(db), str(reports)]) == 0
    out = capsys.readouterr().out
    assert "skipped (not a results file)" in out  # the sensitivity reports
    distinct = {store.content_hash(json.loads(p.read_text())) for p in results}
    assert count(db, "runs") == len(distinct)
    assert history(["list", "--db", str(db)]) == 0
    listing = capsys.readouterr().out.splitlines()
    runs = [line for line in listing if re.match(r"[0-9a-f]{12} ", line)]
    assert listing[-1] == f"{len(distinct)} runs" and len(runs) == len(distinct)
    assert history(["import", "--db", str(db), str(reports)]) == 0
    assert count(db, "runs") == len(distinct)


def test_import_skips_other_json(
    tmp_path: Path, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_history(tmp_path, [1.0, 1.0])
    (tmp_path / "notes.json").write_text('{"report": "text"}')
    # Another command's document with rows of its own (perfsuite filtering's study).
    (tmp_path / "study.json").write_text('{"schema": "perfsuite-filtering/1", "rows": [{}]}')
    assert history(["import", "--db", str(db), str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "notes.json: skipped" in printed and "study.json: skipped" in printed
    assert count(db, "runs") == 2


@pytest.mark.parametrize("content", [b"", b"not a database at all\n", b"SQLite format 3\x00"])
@pytest.mark.parametrize(
    "argv", [["history", "list"], ["history", "check"], ["dashboard", "-o", "{site}"]]
)
def test_read_only_commands_never_make_or_change_a_database(tmp_path, capsys, content, argv):
    """Issue 20: `history list --db empty-file` turned the file into a 40 KB database."""
    pytest.importorskip("plotly")
    path = tmp_path / "mine.db"
    path.write_bytes(content)
    before = path.stat().st_mtime_ns
    filled = [a.format(site=tmp_path / "site") for a in argv]
    assert perfsuite([*filled, "--db", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not a history database" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert path.read_bytes() == content and path.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.db"]  # no journal, no site
    missing = tmp_path / "none.db"
    assert perfsuite([*filled, "--db", str(missing)]) == 2 and not missing.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["add", "--db", "{db}", "{tmp}/missing.json"],
        ["add", "--db", "{db}", "{tmp}/missing.json", "{bad}"],
        ["add", "--db", "{tmp}", "{tmp}/x.json"],  # a folder as the db
        ["import", "--db", "{db}", "/nonexistent"],
        ["import", "--db", "{db}", "{only_bad}"],
    ],
)
def test_bad_input_one_line_exit_2_and_no_database(tmp_path, db, capsys, argv):
    """Issue 30: these exited 2 but left an initialised database behind, which `history
    list` then read as `0 runs`, exit 0."""
    (tmp_path / "only_bad").mkdir()
    bad = tmp_path / "only_bad" / "bad.json"
    bad.write_text('{"schema_version": 1, "env": {}, "rows": [')
    filled = [a.format(db=db, bad=bad, tmp=tmp_path, only_bad=bad.parent) for a in argv]
    assert history(filled) == 2
    lines = capsys.readouterr().err.splitlines()  # one line a bad input
    assert len(lines) == argv.count("{bad}") + 1 and all(x.startswith("error: ") for x in lines)
    assert not db.exists() and not db.parent.exists()
    assert history(["list", "--db", str(db)]) == 2  # still no history


def test_a_good_file_after_a_bad_one_is_stored(tmp_path, db, capsys):
    (good,) = write_history(tmp_path, [1.0])
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert history(["add", "--db", str(db), str(bad), str(good)]) == 2  # the bad one is named
    assert count(db, "runs") == 1 and "bad.json" in capsys.readouterr().err


def test_list_fits_80_columns(tmp_path, db, monkeypatch, capsys):
    """Issue 30: `history list` lines were 100-121 characters at 80 columns."""
    folder = tmp_path / "results-from-a-long-night" / "of-sweeping"
    folder.mkdir(parents=True)
    paths = write_history(folder, [1.0, 1.0, 1.1])
    assert history(["add", "--db", str(db), *map(str, paths)]) == 0
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "80")
    assert perfsuite(["history", "list", "--db", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 80 and not any(x.endswith(" ") for x in lines)
    flat = " ".join(lines)
    for i, path in enumerate(paths):
        assert f"2026-01-01T00:{i:02d}:00Z  {i:02d}abababab  1 cells" in flat
        assert "".join(lines).count(path.name) == 1
    assert lines[-1] == "3 runs"
    # Wide enough, however deep pytest's folder is (issue 46): one line a run, a table.
    monkeypatch.setenv("COLUMNS", str(max(len(str(p)) for p in paths) + 120))
    assert perfsuite(["history", "list", "--db", str(db)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2 + 3 + 1
