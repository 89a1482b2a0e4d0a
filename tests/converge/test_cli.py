"""The converge command end to end: parity of ours with eager, a method's failure kept
to its own runs, outputs, bad input (deaths and timeouts of workers:
tests/harness/test_lifecycle.py, tests/converge/test_kind.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from plugins import use_plugins
from step.stepping import served_here

from perfsuite.cli import main as perfsuite
from perfsuite.converge.presets import PRESETS
from perfsuite.results.results import load_results, write_results

# One sweep for the tests below: ours' runs in a worker (~7 CPU-s: Llama's imports), HERE's
# served in this process, fake-missing-package's decided in the parent
# (tests/converge/test_kind.py). one-file: the plugin declared in one file (test_plugins).
METHODS = ["fake-raises", "ours", "fake-missing-package", "one-file"]
HERE = ["eager", "eager-reordered", "fake-raises", "one-file"]
STEPS = 3
# The sweep's mechanics, not the model, are under test: the smoke preset cut down (the
# workers get it from the parent), a quarter of its held-out batches.
TINY = replace(PRESETS["smoke"], vocab=128, hidden=32, intermediate=64, layers=1, heads=2)
TINY = replace(TINY, batch=2, seq=16, eval_batches=4)


def main(argv: list[str]) -> int:
    """``perfsuite converge ARGV``'s exit status (argparse's refusals exit)."""
    try:
        return perfsuite(["converge", *argv])
    except SystemExit as exc:
        return int(exc.code)


def _document(path: Path) -> dict:
    document = load_results(path)  # the version 2 results envelope, train rows
    assert "partial" not in document["env"] and {r["kind"] for r in document["rows"]} == {"train"}
    return document


def _runs(path: Path) -> dict[tuple[str, float], dict]:
    return {(run["method"], run["beta"]): run for run in _document(path)["rows"]}


@pytest.mark.integration
def test_ours_trains_like_eager_and_failures_are_recorded(tmp_path, monkeypatch, capsys):
    """One sweep over the fake-method plugin, ours and eager at β 0 then 0.1: ours (its
    torch engine, in its own worker) gets a `same` verdict, while a method that raises
    and one whose package is missing are recorded without losing the others; the table
    and the three figures land next to the JSON and are printed. The results are the
    version 2 envelope, rewritten after each run, ``partial`` until the last."""
    out = tmp_path / "converge.json"
    writes = []

    def write(path: Path, document: dict) -> Path:
        writes.append((document["env"].get("partial"), len(document["rows"])))
        return write_results(path, document)

    monkeypatch.setattr("perfsuite.harness.command.write_results", write)
    monkeypatch.setitem(PRESETS, "smoke", TINY)
    served_here(monkeypatch, "perfsuite.converge.runner.TrainKind", HERE, tmp_path)
    use_plugins(monkeypatch, "plugins.fake_methods,plugins.one_file_method")
    monkeypatch.setenv("COLUMNS", "120")
    argv = ["--methods", ",".join(METHODS), "--beta", "0,0.1", "--steps", str(STEPS)]
    assert main([*argv, "--out", str(out)]) == 1  # fake-raises crashed
    printed = capsys.readouterr().out
    runs = _runs(out)
    order = list(dict.fromkeys(m for m, _ in runs))
    assert order == ["eager", "eager-reordered", *METHODS], order
    for beta in (0.1, 0.0):
        assert runs["eager-reordered", beta]["parity"]["verdict"] == "yardstick"
        ours = runs["ours", beta]
        assert ours["status"] == "ok"
        assert ours["parity"]["verdict"] == "same", ours["parity"]
        assert len(ours["steps"]) == STEPS and ours["heldout"]["positions"] == 4 * 2 * 16
        for metric in ("ece", "rms_ce", "sce", "ace", "mce"):
            assert 0 <= ours["heldout"][metric] <= 1
        assert runs["eager", beta]["parity"]["verdict"] == "reference"
        raised = runs["fake-raises", beta]
        assert raised["status"] == "error"
        assert "deliberate failure inside the loss" in raised["reason"]
        assert "\n" not in raised["reason"]
        assert runs["fake-missing-package", beta]["status"] == "unavailable"
        assert "perfsuite_no_such_package" in runs["fake-missing-package", beta]["reason"]
    env = _document(out)["env"]
    assert env["converge"]["data"]["kind"].startswith("synthetic sparse bigram")
    assert env["converge"]["tolerances"]["fp32"]["loss_rtol"] == 2e-5
    # ours runs its torch engine on CPU: natively, not under the interpreter
    assert not any(run["interpreted"] for run in runs.values())
    # a dirty tree adds a fingerprint of its changes ("diff")
    assert {"sha", "dirty"} <= set(env["git"]) <= {"sha", "dirty", "diff"}
    assert "same" in printed
    for name in ("converge.md", "converge-loss.png", "converge-reliability.png"):
        assert (out.parent / name).stat().st_size > 1000, name
        assert str(out.parent / name) in printed.replace("\n", "")
    assert "| ours | 0 | fp32 | same |" in (out.parent / "converge.md").read_text()
    # A method declared in one file trains with its declared loss, like eager; the
    # machine's state over each trained run is kept (its busy mark, its group).
    assert runs["one-file", 0.0]["status"] == "ok"
    assert runs["one-file", 0.0]["parity"]["verdict"] == "same"
    assert "busy" in runs["ours", 0.0]
    assert any(g["group"].startswith("ours N=") for g in env["machine"]["groups"])
    raw = json.loads(out.read_text())
    assert raw["schema_version"] == 2 and "partial" not in raw["env"]
    assert all(r["kind"] == "train" and "steps" in r["metrics"] for r in raw["rows"])
    assert writes == [(True, n) for n in range(1, len(raw["rows"]) + 1)] + [
        (None, len(raw["rows"]))
    ]
    for argv in (["compare", str(out), str(out), "--accept-busy"], ["report", str(out)]):
        assert perfsuite(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{out} holds train rows; {argv[0]} takes" in err, err


@pytest.mark.integration
@pytest.mark.slow  # 7-30 s of ranks, workers or compiles here; `-m slow` runs it
def test_real_text_trains_and_records_no_truth(tmp_path: Path):
    out = tmp_path / "text.json"
    argv = ["--methods", "eager", "--data", "text", "--beta", "0", "--steps", "2"]
    assert main([*argv, "--out", str(out)]) == 0
    document = _document(out)
    assert document["env"]["converge"]["data"]["truth_known"] is False
    held = document["rows"][0]["heldout"]
    assert held["loss"] > 0 and 0 <= held["ece"] <= 1 and "kl_to_truth" not in held


def test_outputs_are_checked_before_training(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """An existing results file or plot is refused (a file as the folder: tests/test_cli.py)."""
    existing = tmp_path / "old.json"
    existing.write_text("{}")
    assert main(["--out", str(existing)]) == 2
    assert "--force" in capsys.readouterr().err
    assert existing.read_text() == "{}"
    # A plot from an earlier run next to a new --out is not overwritten silently either.
    (tmp_path / "new-loss.png").write_text("old plot")
    assert main(["--out", str(tmp_path / "new.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "new-loss.png: exists" in err, err
