"""Stored baselines: written only by `perfsuite baseline update`, one file per
device and shape, and found again by `perfsuite compare` given the folder."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from perfsuite.cli import main as perfsuite_main
from perfsuite.regress import baseline_store
from perfsuite.results.results import ResultsError, Row, load_results, new_document, write_results
from regress.test_compare import ENV, make_doc, one_error_line, slower

SLUG = "nvidia-h100-80gb-hbm3"
SMOKE = {"shape": "smoke*", "tokens": 64, "vocab": 1024, "hidden": 64}
FILES = [f"{SLUG}/gemma2-2b.json", f"{SLUG}/smoke-n64-v1024-d64.json"]


def document(factor: float = 1.0, env: dict = ENV) -> dict:
    """Two shapes, Gemma2-2B and a smoke one, each timed ``factor`` times slower."""
    doc = make_doc(env=env)
    doc["rows"] += make_doc(env=env, eager=SMOKE, ours=SMOKE)["rows"]
    return slower(slower(doc, "eager", factor), "ours", factor)


def baseline_cli(*argv) -> int:
    return perfsuite_main(["baseline", *map(str, argv)])


def compare_cli(*argv) -> int:
    return perfsuite_main(["compare", *map(str, argv)])


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A store that `baseline update` made of document()."""
    assert baseline_cli("update", write_results(tmp_path / "base.json", document()), "--root",
                        tmp_path / "baselines") == 0  # fmt: skip
    return tmp_path / "baselines"


def test_update_writes_one_file_per_shape_under_the_device(tmp_path, capsys):
    results = write_results(tmp_path / "run.json", document())
    root = tmp_path / "baselines"
    assert baseline_cli("update", results, "--root", root, "--dry-run") == 0
    assert not root.exists() and "would write" in capsys.readouterr().out
    assert baseline_cli("update", results, "--root", root) == 0
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*.json")) == FILES
    stored = load_results(root / SLUG / "gemma2-2b.json")
    assert stored["env"] == ENV and {r["shape"] for r in stored["rows"]} == {"gemma2-2b"}
    assert stored["rows"][0]["samples_ms"]  # raw samples kept for the U test
    out = capsys.readouterr().out
    assert "wrote" in out and "warning" not in out  # a quiet run's
    assert baseline_cli("list", "--root", root) == 0
    assert "6 cells" in capsys.readouterr().out


STEP = [
    Row(kind="step", method="ours", shape="gemma2-2b", tokens=256, vocab=256000, hidden=2304,
        dtype="fp32", beta=0.0, phase=phase, status="ok", device="cpu",
        workload="step(layers=1,seq=256,batch=1)", samples_ms=[5.0, 5.1], median_ms=5.0)
    for phase in ("fwd", "bwd", "opt", "step")
]  # fmt: skip


STEP_ROWS = "holds step rows; baseline update takes loss or tp rows"


@pytest.mark.parametrize(
    ("text", "words"),
    [  # A step file's cells were stored as the gemma2-2b loss baseline (issue 46): its
        # rows are named by their model, and `compare` would judge loss cells against them.
        (lambda: json.dumps(new_document(ENV, STEP)), STEP_ROWS),
        (lambda: json.dumps(new_document(ENV, make_doc()["rows"] + STEP)), STEP_ROWS),
        (lambda: '{"schema_version": 1, "env": {}, "rows": [', "not valid JSON"),
    ],
    ids=["step", "mixed", "truncated"],
)
def test_update_refuses_what_is_no_loss_file(tmp_path, capsys, text, words):
    results = tmp_path / "run.json"
    results.write_text(text())
    assert baseline_cli("update", results, "--root", tmp_path / "b") == 2
    assert f"error: {results}" in (err := one_error_line(capsys)) and words in err
    assert not (tmp_path / "b").exists()


def test_compare_against_the_stored_folder(root, tmp_path, capsys):
    assert compare_cli(root, write_results(tmp_path / "same.json", document())) == 0
    assert compare_cli(root, write_results(tmp_path / "slow.json", document(factor=1.2))) == 1
    out = capsys.readouterr().out.replace("\n", "")
    assert all(name in out for name in FILES)
    only_gemma = document()
    only_gemma["rows"] = [r for r in only_gemma["rows"] if r["shape"] == "gemma2-2b"]
    doc, paths, missing = baseline_store.stored_baseline(root, only_gemma)
    assert [p.name for p in paths] == ["gemma2-2b.json"] and not missing  # the shapes measured
    assert len(doc["rows"]) == 6


def test_no_stored_baseline_for_this_device(root, tmp_path, capsys):
    other = copy.deepcopy(ENV)
    other["device"]["name"] = "NVIDIA A100-SXM4-80GB"
    cur = write_results(tmp_path / "cur.json", document(env=other))
    assert compare_cli(root, cur) == 2
    err = capsys.readouterr().err
    assert "no baseline is stored for device 'NVIDIA A100-SXM4-80GB'" in err and SLUG in err
    assert "perfsuite baseline update RESULTS --root" in err
    # A fresh clone on a new device: `compare reports/baselines CURRENT` used to say
    # "no such results file" about the folder.
    assert compare_cli(tmp_path / "fresh" / "baselines", cur) == 2
    err = capsys.readouterr().err
    assert "no baseline is stored for device" in err and "no such results file" not in err
    assert "perfsuite baseline update RESULTS" in err


def test_stored_files_from_different_environments_are_refused(root, tmp_path):
    newer = copy.deepcopy(ENV)
    newer["versions"]["torch"] = "2.14.0"
    doc = make_doc(env=newer, eager=SMOKE, ours=SMOKE)
    baseline_cli("update", write_results(tmp_path / "b.json", doc), "--root", root)
    with pytest.raises(ResultsError, match="disagree on the environment"):
        baseline_store.stored_baseline(root, document())


@pytest.mark.parametrize(
    ("shape", "stem"),
    [("gemma2-2b", "gemma2-2b"), ("llama3.2-1b", "llama3.2-1b"), ("smoke*", "smoke-n1-v2-d3"),
     ("", "custom-n1-v2-d3"), ("../etc", "etc")],
)  # fmt: skip
def test_shape_stem(shape, stem):
    assert baseline_store.shape_stem({"shape": shape, "tokens": 1, "vocab": 2, "hidden": 3}) == stem


def test_a_run_with_fewer_ok_cells_does_not_replace_the_baseline(root, tmp_path, capsys):
    broken = document()
    for row in broken["rows"]:
        row.update(status="error", reason="worker crashed")
    bad = write_results(tmp_path / "bad.json", broken)
    before = (root / SLUG / "gemma2-2b.json").read_text()
    assert baseline_cli("update", bad, "--root", root) == 2
    assert "refusing to replace" in capsys.readouterr().err
    assert (root / SLUG / "gemma2-2b.json").read_text() == before  # nothing written
    assert baseline_cli("update", bad, "--root", root, "--force") == 0


def test_a_busy_run_is_stored_with_a_warning(tmp_path, capsys):
    """Issue 30: `baseline update` stored an all-busy run without a word; every later
    `compare` against it then refused to judge time."""
    env = copy.deepcopy(ENV)
    env["machine"] = {"groups": [{"group": "ours", "busy": ["GPU throttled (thermal)"]}]}
    results = write_results(tmp_path / "busy.json", document(env=env))
    assert baseline_cli("update", results, "--root", tmp_path / "b") == 0
    out = capsys.readouterr().out
    assert "warning: " in out and "busy machine (1 of 1 cell groups busy" in out
    assert "--accept-busy" in out


def test_list_fits_80_columns(tmp_path, monkeypatch, capsys):
    """Issue 30: `baseline list` lines were 103 characters at 80 columns."""
    monkeypatch.setenv("COLUMNS", "80")
    root = tmp_path / "a-rather-long-folder-name" / "baselines"
    baseline_cli("update", write_results(tmp_path / "run.json", document()), "--root", root)
    capsys.readouterr()
    assert baseline_cli("list", "--root", root) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and max(map(len, lines)) <= 80 and not any(x.endswith(" ") for x in lines)
    text = " ".join(lines)
    assert text.count("6 cells, 2026-01-01T00:00:00Z, git abc, torch 2.13.0") == 2
    assert "".join(x.strip() for x in lines if "cells" not in x).count(".json") == 2
    # Wide enough for a table row however deep pytest's folder is (issue 46).
    longest = max(len(str(p)) for p in root.rglob("*.json"))
    monkeypatch.setenv("COLUMNS", str(longest + 80))
    assert baseline_cli("list", "--root", root) == 0
    wide = capsys.readouterr().out.splitlines()
    assert len(wide) == 4 and wide[0].split() == ["file", "cells", "created", "git", "torch"]


def _unwritable_folder(tmp_path):
    """A folder nothing can be written to: read-only for a user; root writes anywhere
    on a normal file system, but not under /sys."""
    if os.geteuid() == 0:
        return "/sys/perfsuite-baselines"
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


@pytest.mark.parametrize(
    ("root", "words"),
    [
        ("/proc/perfsuite-baselines", "cannot write there (No such file or directory)"),
        ("{tmp}/run.json", "is a file, not a folder"),
        ("{tmp}/run.json/b", "run.json is a file, not a folder"),
        ("{unwritable}", "cannot write there ("),
    ],
)
def test_update_to_a_root_that_cannot_be_written_says_so_in_one_line(tmp_path, capsys, root, words):
    results = write_results(tmp_path / "run.json", document())
    before = results.read_bytes()
    root = root.format(tmp=tmp_path, unwritable=_unwritable_folder(tmp_path))
    assert baseline_cli("update", results, "--root", root) == 2
    assert f"--root {root}" in (err := one_error_line(capsys)) and words in err
    assert results.read_bytes() == before
    assert baseline_cli("list", "--root", results) == 2  # a file as the root to list
    assert f"--root {results}: is a file" in one_error_line(capsys)
