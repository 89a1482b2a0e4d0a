"""Every command that reads results files refuses a malformed one as a user meets it:
one ``error:`` line on stderr naming the file, the row and the field, exit 2, and nothing
written (no -o file, no baseline, the history database unchanged)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from fake_results import MALFORMED, malformed_text, paper_document

from perfsuite.cli import main
from perfsuite.results.results import Row, new_document, write_results


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "absent"


# Each reader as a user types it ({bad}, {good}: the files, {tmp}: a folder for what it
# writes), and what it must leave as it was.
COMMANDS = {
    "report": ("report {bad} -o {tmp}/out.md", ["out.md"]),
    "compare_new": ("compare {good} {bad}", []),
    "compare_old": ("compare {bad} {good}", []),
    "history_add": ("history add --db {tmp}/history.db {bad}", ["history.db"]),
    "plot": ("plot {bad} -o {tmp}/figures", ["figures"]),
    "merge": ("merge {good} {bad} -o {tmp}/all.json", ["all.json"]),
    "baseline_update": ("baseline update {bad} --root {tmp}/store", ["store"]),
}
# Every reader reads through load_results (one schema check), so not every defect goes to
# every reader: each defect to one, the readers in turn (each refuses some); the file
# without rows, which each reader took its own way before issue 46, to all of them.
CASES = [
    pytest.param(command, mangle, message, id=f"{name}-{command}")
    for i, (name, mangle, message) in enumerate(MALFORMED)
    for command in (COMMANDS if name == "no-rows" else [list(COMMANDS)[i % len(COMMANDS)]])
]


@pytest.mark.parametrize(("command", "mangle", "message"), CASES)
def test_a_malformed_file_is_refused_in_one_line(tmp_path, capsys, command, mangle, message):
    good = write_results(tmp_path / "good.json", paper_document())
    bad = tmp_path / "bad.json"
    bad.write_text(malformed_text(mangle))
    if command == "history_add":  # a database to keep
        assert main(["history", "add", "--db", str(tmp_path / "history.db"), str(good)]) == 0
    line, outputs = COMMANDS[command]
    before = {p: digest(tmp_path / p) for p in outputs}
    capsys.readouterr()
    assert main(line.format(bad=bad, good=good, tmp=tmp_path).split()) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: {message}"), captured.err
    assert captured.out == ""
    assert {p: digest(tmp_path / p) for p in outputs} == before


def step_document() -> dict:
    rows = [
        Row(kind="step", method="ours", tokens=16, vocab=64, hidden=8, dtype="fp32", beta=0.0,
            phase=p, status="ok", workload="step(layers=1,seq=16,batch=1)", median_ms=1.0)
        for p in ("fwd", "bwd", "opt", "step")
    ]  # fmt: skip
    return new_document(paper_document()["env"], rows)


def test_merge_refuses_a_step_file_by_its_kind(tmp_path, capsys):
    """It said the plans' samples differed: the file is another kind of cell."""
    run = write_results(tmp_path / "run.json", paper_document())
    step = write_results(tmp_path / "step.json", step_document())
    out = tmp_path / "all.json"
    assert main(["merge", str(run), str(step), "-o", str(out)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {step} holds step rows; merge takes loss or tp rows"
    ]
    assert not out.exists()


def test_a_good_file_passes_every_reader(tmp_path, capsys):
    """The table above fails for its defects, not because these commands refuse anything."""
    good = write_results(tmp_path / "good.json", paper_document())
    assert main(["report", str(good)]) == 0
    assert main(["compare", str(good), str(good)]) == 0
    assert main(["history", "add", "--db", str(tmp_path / "h.db"), str(good)]) == 0
    assert main(["merge", str(good), "-o", str(tmp_path / "m.json")]) == 0
    assert main(["baseline", "update", str(good), "--root", str(tmp_path / "b")]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["schema_version"] == 2


def test_a_file_without_rows_is_refused_by_the_other_readers_too(tmp_path, capsys):
    """The readers the table above leaves out: a folder's import, converge's render."""
    env = paper_document()["env"]
    folder = tmp_path / "runs"
    empty = write_results(folder / "empty.json", new_document(env, []))
    db = tmp_path / "h.db"
    assert main(["history", "import", "--db", str(db), str(folder)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: {empty}: holds no rows (no cell was written to it)"]
    assert not db.exists()  # no database made for nothing
    trained = write_results(tmp_path / "train.json", new_document(env, []))
    assert main(["converge", "--render", str(trained)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: {trained}: holds no rows (no cell was written to it)"]
