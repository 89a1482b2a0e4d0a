"""The converge command end to end: parity of ours with eager, failures kept, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.converge.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _runs(path: Path) -> dict[str, dict]:
    document = json.loads(path.read_text())
    assert document["complete"] is True
    return {run["method"]: run for run in document["runs"]}


def test_ours_trains_like_eager_and_failures_are_recorded(
    fake_plugins: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """The smoke preset (fp32, beta 0): ours gets a `same` verdict, while a method that
    raises and one whose package is missing are recorded without losing the others."""
    out = tmp_path / "converge.json"
    methods = "fake-raises,ours,fake-missing-package"
    rc = main(["--preset", "smoke", "--methods", methods, "--beta", "0", "--out", str(out)])
    assert rc == 1  # fake-raises crashed
    runs = _runs(out)
    assert list(runs) == ["eager", "fake-raises", "ours", "fake-missing-package"]
    ours = runs["ours"]
    assert ours["status"] == "ok"
    assert ours["parity"]["verdict"] == "same", ours["parity"]
    assert len(ours["steps"]) == 20 and ours["heldout"]["positions"] == 4 * 8 * 32
    assert runs["eager"]["parity"]["verdict"] == "reference"
    raised = runs["fake-raises"]
    assert raised["status"] == "error"
    assert "deliberate failure inside the loss" in raised["reason"]
    assert "\n" not in raised["reason"]
    assert runs["fake-missing-package"]["status"] == "unavailable"
    assert "perfsuite_no_such_package" in runs["fake-missing-package"]["reason"]
    document = json.loads(out.read_text())
    assert document["data"]["kind"].startswith("synthetic sparse bigram")
    assert document["tolerances"]["fp32"]["loss_rtol"] == 2e-5
    assert "same" in capsys.readouterr().out


def test_a_wrong_loss_gets_a_differs_verdict(fake_plugins: None, tmp_path: Path):
    out = tmp_path / "wrong.json"
    argv = ["--methods", "fake-wrong", "--beta", "0.1", "--steps", "3", "--out", str(out)]
    assert main(argv) == 1
    wrong = _runs(out)["fake-wrong"]
    assert wrong["status"] == "ok" and wrong["parity"]["verdict"] == "differs"
    assert wrong["parity"]["loss_first_step_over_tol"] == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--methods", "eager,nope"], "unknown 'nope'"),
        (["--steps", "0"], "--steps must be >= 1"),
        (["--beta", "1.5"], "--beta values must be in [0, 1)"),
        (["--dtype", "fp8"], "--dtype: unknown fp8"),
        (["--preset", "huge"], "--preset: unknown 'huge'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    assert main([*argv, "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "r.json").exists()


def test_unwritable_out_is_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["--out", str(blocker / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write there" in err, err
    existing = tmp_path / "old.json"
    existing.write_text("{}")
    assert main(["--out", str(existing)]) == 2
    assert "--force" in capsys.readouterr().err
    assert existing.read_text() == "{}"


def test_python_dash_m_entry_point(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "PERFSUITE_PLUGINS"}
    proc = subprocess.run(
        [sys.executable, "-m", "perfsuite.converge", "--steps", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "perfsuite converge: error: --steps must be >= 1, got 0"
    ]
