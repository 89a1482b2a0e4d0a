"""One writer per results file, for every command that writes one as it goes (issue 46
item 1): two `run`s on one --out both exited 0 and the file kept only the second's rows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.cli import main
from perfsuite.results.lock import WriterLock
from perfsuite.results.results import load_results

CHEAP = ["run", "--shape", "smoke", "--methods", "eager", "--phases", "fwd", "--samples", "2"]
# A first writer in a process of its own: it takes the lock through the API every command
# uses, says so, writes its file when told, and holds the lock until its stdin closes.
HOLDER = """
import sys
from perfsuite.results.lock import WriterLock
from perfsuite.results.results import write_atomically
out = sys.argv[1]
writer = WriterLock(out)
print("held", flush=True)
sys.stdin.readline()
write_atomically(out, "the first writer's rows")
print("wrote", flush=True)
sys.stdin.read()
"""


def _one_error_line(err: str, out: Path) -> None:
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert f"{out} is being written by another perfsuite process" in err
    assert "Traceback" not in err


@pytest.mark.integration
def test_a_second_run_on_one_out_is_refused_while_the_first_writes(tmp_path, capsys):
    out = tmp_path / "X.json"
    first = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert first.stdout.readline() == "held\n"
        # Before the first has written a row (the case: started 3 s apart).
        assert main([*CHEAP, "--out", str(out)]) == 2
        _one_error_line(capsys.readouterr().err, out)
        assert not out.exists()  # the second wrote nothing
        first.stdin.write("write\n")
        first.stdin.flush()
        assert first.stdout.readline() == "wrote\n"
        # After it has: --force does not take the file from it either.
        assert main([*CHEAP, "--out", str(out), "--force"]) == 2
        _one_error_line(capsys.readouterr().err, out)
        assert out.read_text() == "the first writer's rows"
    finally:
        first.stdin.close()
        assert first.wait(timeout=60) == 0
    # The first is done: no lock is left, and the file is anyone's again, a finished
    # run's too (taken here as any writer takes it; a run costs a worker process).
    assert not out.with_name(f".{out.name}.lock").exists()
    WriterLock(out).release()
    assert main([*CHEAP, "--out", str(out), "--force"]) == 0
    assert [r["method"] for r in load_results(out)["rows"]] == ["eager", "eager"]
    assert not out.with_name(f".{out.name}.lock").exists()
    WriterLock(out).release()


COMMANDS = {
    "run": [*CHEAP, "--force"],
    "step": ["step", "--model", "smoke", "--methods", "eager", "--force"],
    "converge": ["converge", "--preset", "smoke", "--methods", "eager", "--force"],
    "sweep": ["sweep", "--tokens", "8", "--vocab", "16", "--hidden", "8", "--resume"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_that_writes_as_it_goes_refuses_a_held_file(tmp_path, capsys, command):
    """run, step, converge and sweep take the one lock (``lock.claim``): held by another
    writer (a lock is per open file, so one held here stands for another process's), the
    file is refused in one line, before anything is measured, and left as it was."""
    out = tmp_path / "held.json"
    out.write_text("another writer's rows")
    held = WriterLock(out)
    try:
        assert main([*COMMANDS[command], "--out", str(out)]) == 2
        captured = capsys.readouterr()
        _one_error_line(captured.err, out)
        assert "eager" not in captured.out  # refused up front: nothing ran
        assert out.read_text() == "another writer's rows"
    finally:
        held.release()
