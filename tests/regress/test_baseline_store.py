"""Stored baselines: written only by `perfsuite baseline update`, one file per
device and shape, and found again by `perfsuite compare` given the folder."""

from __future__ import annotations

import copy

import pytest

from perfsuite.cli import main as perfsuite_main
from perfsuite.regress import baseline_store
from perfsuite.results.results import ResultsError, Row, load_results, new_document, write_results

ENV = {
    "created": "2026-01-01T00:00:00Z",
    "git": {"sha": "abc", "dirty": False},
    "versions": {"torch": "2.13.0", "triton": "3.7.1"},
    "device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "cuda": "12.8"},
}
SLUG = "nvidia-h100-80gb-hbm3"


def rows_for(shape: str, tokens: int, factor: float = 1.0) -> list[Row]:
    return [
        Row(
            kind="loss",
            method=method,
            shape=shape,
            tokens=tokens,
            vocab=1024,
            hidden=64,
            dtype="bf16",
            beta=0.0,
            phase="fwd+bwd",
            status="ok",
            device="cuda",
            samples_ms=[factor * (10 + 0.01 * i) for i in range(20)],
            median_ms=factor * 10.1,
            peak_bytes=1 << 20,
        )
        for method in ("eager", "ours")
    ]


def document(factor: float = 1.0, env: dict = ENV) -> dict:
    rows = rows_for("gemma2-2b", 8192, factor) + rows_for("smoke*", 64, factor)
    return new_document(copy.deepcopy(env), rows)


def baseline_cli(*argv) -> int:
    return perfsuite_main(["baseline", *map(str, argv)])


def compare_cli(*argv) -> int:
    return perfsuite_main(["compare", *map(str, argv)])


def test_update_writes_one_file_per_shape_under_the_device(tmp_path, capsys):
    results = write_results(tmp_path / "run.json", document())
    root = tmp_path / "baselines"
    assert baseline_cli("update", results, "--root", root) == 0
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.json"))
    assert files == [f"{SLUG}/gemma2-2b.json", f"{SLUG}/smoke-n64-v1024-d64.json"]
    stored = load_results(root / SLUG / "gemma2-2b.json")
    assert stored["env"] == ENV and {r["shape"] for r in stored["rows"]} == {"gemma2-2b"}
    assert stored["rows"][0]["samples_ms"]  # raw samples kept for the U test
    assert "wrote" in capsys.readouterr().out
    assert baseline_cli("list", "--root", root) == 0
    assert "2 cells" in capsys.readouterr().out


def test_dry_run_writes_nothing(tmp_path, capsys):
    results = write_results(tmp_path / "run.json", document())
    assert baseline_cli("update", results, "--root", tmp_path / "b", "--dry-run") == 0
    assert not (tmp_path / "b").exists() and "would write" in capsys.readouterr().out


def test_update_refuses_step_cells(tmp_path, capsys):
    """A step file's cells were stored as the gemma2-2b loss baseline (issue 46): its
    rows are named by their model, and `compare` would judge loss cells against them."""
    step = [
        Row(kind="step", method="ours", shape="gemma2-2b", tokens=256, vocab=256000, hidden=2304,
            dtype="fp32", beta=0.0, phase=phase, status="ok", device="cpu",
            workload="step(layers=1,seq=256,batch=1)", samples_ms=[5.0, 5.1], median_ms=5.0)
        for phase in ("fwd", "bwd", "opt", "step")
    ]  # fmt: skip
    mixed = new_document(copy.deepcopy(ENV), [*rows_for("gemma2-2b", 8192), *step])
    for name, doc in (("step", new_document(copy.deepcopy(ENV), step)), ("mixed", mixed)):
        results = write_results(tmp_path / f"{name}.json", doc)
        assert baseline_cli("update", results, "--root", tmp_path / "b") == 2
        err = capsys.readouterr().err
        assert err == f"error: {results} holds step rows; baseline update takes loss or tp rows\n"
        assert not (tmp_path / "b").exists()


def test_update_refuses_an_unreadable_file(tmp_path, capsys):
    bad = tmp_path / "run.json"
    bad.write_text('{"schema_version": 1, "env": {}, "rows": [')
    assert baseline_cli("update", bad, "--root", tmp_path / "b") == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_compare_against_the_stored_folder(tmp_path, capsys):
    root = tmp_path / "baselines"
    baseline_cli("update", write_results(tmp_path / "base.json", document()), "--root", root)
    same = write_results(tmp_path / "same.json", document())
    assert compare_cli(root, same) == 0
    slow = write_results(tmp_path / "slow.json", document(factor=1.2))
    assert compare_cli(root, slow) == 1
    out = capsys.readouterr().out
    assert f"{SLUG}/gemma2-2b.json" in out and f"{SLUG}/smoke-n64-v1024-d64.json" in out


def test_compare_only_reads_the_shapes_measured(tmp_path):
    root = tmp_path / "baselines"
    baseline_cli("update", write_results(tmp_path / "base.json", document()), "--root", root)
    only_gemma = document()
    only_gemma["rows"] = [r for r in only_gemma["rows"] if r["shape"] == "gemma2-2b"]
    doc, paths, missing = baseline_store.stored_baseline(root, only_gemma)
    assert [p.name for p in paths] == ["gemma2-2b.json"] and not missing
    assert len(doc["rows"]) == 2


def test_no_stored_baseline_for_this_device(tmp_path, capsys):
    root = tmp_path / "baselines"
    baseline_cli("update", write_results(tmp_path / "base.json", document()), "--root", root)
    other = copy.deepcopy(ENV)
    other["device"]["name"] = "NVIDIA A100-SXM4-80GB"
    cur = write_results(tmp_path / "cur.json", document(env=other))
    assert compare_cli(root, cur) == 2
    err = capsys.readouterr().err
    assert "no baseline is stored for device 'NVIDIA A100-SXM4-80GB'" in err and SLUG in err
    assert "perfsuite baseline update RESULTS --root" in err


def test_a_store_not_made_yet_says_how_to_make_one(tmp_path, capsys):
    """A fresh clone on a new device: `compare reports/baselines CURRENT` used to say
    "no such results file" about the folder."""
    cur = write_results(tmp_path / "cur.json", document())
    assert compare_cli(tmp_path / "baselines", cur) == 2
    err = capsys.readouterr().err
    assert "no baseline is stored for device" in err and "no such results file" not in err
    assert "perfsuite baseline update RESULTS" in err


def test_stored_files_from_different_environments_are_refused(tmp_path):
    root = tmp_path / "baselines"
    baseline_cli("update", write_results(tmp_path / "a.json", document()), "--root", root)
    newer = copy.deepcopy(ENV)
    newer["versions"]["torch"] = "2.14.0"
    doc = new_document(newer, rows_for("smoke*", 64))
    baseline_cli("update", write_results(tmp_path / "b.json", doc), "--root", root)
    with pytest.raises(ResultsError, match="disagree on the environment"):
        baseline_store.stored_baseline(root, document())


@pytest.mark.parametrize(
    "row, stem",
    [
        ({"shape": "gemma2-2b", "tokens": 1, "vocab": 2, "hidden": 3}, "gemma2-2b"),
        ({"shape": "llama3.2-1b", "tokens": 1, "vocab": 2, "hidden": 3}, "llama3.2-1b"),
        ({"shape": "smoke*", "tokens": 1, "vocab": 2, "hidden": 3}, "smoke-n1-v2-d3"),
        ({"shape": "", "tokens": 1, "vocab": 2, "hidden": 3}, "custom-n1-v2-d3"),
        ({"shape": "../etc", "tokens": 1, "vocab": 2, "hidden": 3}, "etc"),
    ],
)
def test_shape_stem(row, stem):
    assert baseline_store.shape_stem(row) == stem


def test_a_run_with_fewer_ok_cells_does_not_replace_the_baseline(tmp_path, capsys):
    root = tmp_path / "baselines"
    good = write_results(tmp_path / "good.json", document())
    assert baseline_cli("update", good, "--root", root) == 0
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
    quiet = write_results(tmp_path / "quiet.json", document())
    assert baseline_cli("update", quiet, "--root", tmp_path / "q") == 0
    assert "warning" not in capsys.readouterr().out


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
    assert text.count("2 cells, 2026-01-01T00:00:00Z, git abc, torch 2.13.0") == 2
    assert "".join(x.strip() for x in lines if "cells" not in x).count(".json") == 2
    # Wide enough for a table row however deep pytest's folder is (issue 46).
    longest = max(len(str(p)) for p in root.rglob("*.json"))
    monkeypatch.setenv("COLUMNS", str(longest + 80))
    assert baseline_cli("list", "--root", root) == 0
    wide = capsys.readouterr().out.splitlines()
    assert len(wide) == 4 and wide[0].split() == ["file", "cells", "created", "git", "torch"]


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    assert captured.err.startswith("error: ") and "Errno" not in captured.err
    return captured.err


def _unwritable_folder(tmp_path):
    """A folder nothing can be written to: read-only for a user; root writes anywhere
    on a normal file system, but not under /sys."""
    import os

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
    assert f"--root {root}" in (err := _one_error_line(capsys)) and words in err
    assert results.read_bytes() == before


def test_update_refuses_a_malformed_results_file(tmp_path, capsys):
    doc = document()
    doc["rows"][0]["status"] = "bogus"
    bad = write_results(tmp_path / "run.json", doc)
    assert baseline_cli("update", bad, "--root", tmp_path / "b") == 2
    assert "bogus" in _one_error_line(capsys)
    assert not (tmp_path / "b").exists()


def test_list_of_a_file_as_root_is_an_error(tmp_path, capsys):
    results = write_results(tmp_path / "good.json", document())
    assert baseline_cli("list", "--root", results) == 2
    assert f"--root {results}: is a file" in _one_error_line(capsys)
