"""What the sweep and array tests share: ``perfsuite sweep`` as typed, a sweep's file as
it stands before its first cell, and a refusal that leaves every file as it was."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from perfsuite.cli import main
from perfsuite.run import sweep


def sweep_cli(*argv: str) -> int:
    try:
        return main(["sweep", *argv])
    except SystemExit as exc:  # argparse's own refusals
        return int(exc.code)


def started(path: Path, argv: list[str], run: bool = False) -> None:
    """The file a sweep of ``argv`` writes before its first cell (nothing measured); with
    ``run``, as ``perfsuite run`` writes it: a plan, no sweep."""
    parser = argparse.ArgumentParser()
    sweep.add_arguments(parser)
    plan, grid = sweep.plan_from_args(parser.parse_args(argv))
    job = sweep.Sweep(plan, path, grid=grid)
    job.checkpoint.save()
    job.checkpoint.writer.release()
    if run:
        doc = json.loads(path.read_text())
        del doc["env"]["sweep"]
        path.write_text(json.dumps(doc))


def refused(capsys: pytest.CaptureFixture[str], folder: Path, *argv: str) -> str:
    """``sweep ARGV`` exits 2 with one ``error:`` line, every file in ``folder`` (an
    array's parts folder too) as it was."""
    before = {p: p.read_bytes() for p in folder.iterdir()}
    assert sweep_cli(*argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert {p: p.read_bytes() for p in folder.iterdir()} == before  # nothing written
    return err


# A resume of another sweep's file (issue 36): (what --out holds: a sweep of the grid with
# these arguments changed, "run"'s file or none, the resume's arguments, what is said).
RESUMES = [
    ("run", ["--resume"], "--resume {out}: not a sweep's results file"),
    (None, ["--resume"], "--resume {out}: no such file, nothing to resume"),
    ([], ["--resume", "--redo", "bogus"], "--redo bogus: 'bogus' is not a status to measure"),
]
