"""The one driver of the measuring commands (``harness.command``): the file it holds,
rewritten after every finished case, and what Ctrl-C keeps and says."""

from __future__ import annotations

from dataclasses import asdict

import pytest
from rich.console import Console

from perfsuite.harness.command import Checkpoint, command
from perfsuite.harness.kind import checkpointed
from perfsuite.results.lock import FileLocked
from perfsuite.results.results import PHASES, Row, load_results, new_document, write_results


def _rows(beta: float) -> list[dict]:
    """One finished case's rows: a phase each."""
    return [
        asdict(Row("eager", 8, 16, 4, "fp32", beta, p, "ok", kind="loss", median_ms=1.0,
                   p20_ms=0.9, p80_ms=1.1, samples_ms=[0.9, 1.0, 1.1], peak_bytes=10,
                   peak_abs_bytes=20, max_abs_err=0.0))
        for p in PHASES
    ]  # fmt: skip


def test_an_interrupt_keeps_every_case_told_and_says_so(tmp_path):
    """The file after each case; on Ctrl-C also a case told as the signal came (not yet
    written); one line saying how many rows the file holds; the file free again."""
    out, console = tmp_path / "r.json", Console(record=True, width=300)
    checkpoint = Checkpoint(out)
    with pytest.raises(FileLocked):
        Checkpoint(out)  # a second writer of the same file is refused

    def measure(progress, notice) -> dict:
        report = checkpointed({"device": {"name": "cpu"}}, progress, checkpoint)
        report("eager", {"beta": 0.0}, _rows(0.0))
        assert len(load_results(out)["rows"]) == 3
        checkpoint.rows.extend(_rows(0.1))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        command(checkpoint, measure, console, [("eager", {}), ("eager", {})])
    kept = load_results(out)
    assert len(kept["rows"]) == 6 and kept["env"]["partial"] is True
    said = " ".join(console.export_text().split())
    assert said == f"interrupted: 6 finished cell row(s) kept in {out} (a partial results file)"
    Checkpoint(out, overwrite=True).writer.release()


def test_a_checkpoint_counts_the_rows_its_file_holds(tmp_path):
    """What an interrupted run says it kept is the file's, never a document it has not
    written; an old file at the path is not this run's until it writes."""
    path = tmp_path / "r.json"
    write_results(path, new_document({}, _rows(0.0)))
    with Checkpoint(path, overwrite=True) as checkpoint:  # as `run --force` over it
        assert checkpoint.kept() == 0  # nothing written by this run yet
        document = new_document({}, _rows(0.0))
        checkpoint.save(document)
        assert checkpoint.kept() == len(document["rows"]) > 0
        document["rows"].append(dict(document["rows"][0]))  # told, not yet written
        assert checkpoint.kept() == len(document["rows"]) - 1
