"""The command line imports a subcommand's modules only when it runs: `perfsuite --help`
and `perfsuite shapes` import no torch (they took 3.4 s, torch and every subcommand's
module imported to build the parser)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfsuite.cli import main

CODE = """
import contextlib, io, sys
from perfsuite.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main({argv!r})
    except SystemExit as exc:
        assert exc.code == 0, exc.code
assert {expect!r} in out.getvalue(), out.getvalue()
heavy = ("torch", "numpy", "perfsuite.plan.registry", "perfsuite.regress.compare")
print(sorted(m for m in heavy if m in sys.modules))
"""


@pytest.mark.parametrize(
    ("argv", "expect"),
    [(["--help"], "kernel-report"), (["shapes"], "gemma2-2b"), (["--version"], "perfsuite")],
)
@pytest.mark.integration
def test_help_and_shapes_import_no_torch(argv, expect):
    done = subprocess.run(
        [sys.executable, "-c", CODE.format(argv=argv, expect=expect)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_top_level_help_lists_every_subcommand_with_its_line(capsys):
    from perfsuite.parser import MODULE_COMMANDS

    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for name, _, help_text in MODULE_COMMANDS:
        assert f"{name} {' '.join(help_text.split())}" in text, name
    for name in ("run", "shapes", "methods"):
        assert f" {name} " in text


def test_a_subcommand_gets_its_arguments_only_when_typed(capsys):
    """Its options are known after top-level options too; an unknown command is still
    named among every choice."""
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    with pytest.raises(SystemExit) as exc:
        main(["nope", "--shape", "smoke"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nope'" in err and "kernel-report" in err and "shapes" in err


# What the installed `perfsuite` console script runs (pip's entry-point script).
CONSOLE_SCRIPT = "import sys; from perfsuite.cli import main; sys.exit(main())"


SWEEP = ["sweep", "--tokens", "64", "--vocab", "64", "--hidden", "32", "--dtype", "fp32",
         "--methods", "eager", "--beta", "0", "--samples", "1", "--out", "s.json"]  # fmt: skip
# converge loads torch for the registry before its dry run: the signal lands there
EARLY = [(SWEEP, signal.SIGINT), (SWEEP, signal.SIGTERM),
         (["converge", "--preset", "smoke", "--dry-run"], signal.SIGINT)]  # fmt: skip


@pytest.mark.parametrize(("argv", "signum"), EARLY, ids=["sweep-INT", "sweep-TERM", "converge-INT"])
@pytest.mark.integration
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps")
def test_an_interrupt_while_the_command_loads_exits_130_without_a_traceback(argv, signum, tmp_path):
    """Ctrl-C 1-3 s into `sweep`, while its modules still loaded, printed a KeyboardInterrupt
    traceback (issue 46): the signal goes the moment torch's library is mapped, in the middle
    of `import torch` (about a second in on a quiet 2-core machine)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CONSOLE_SCRIPT, *argv],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    maps = Path(f"/proc/{proc.pid}/maps")
    while "libtorch_cpu" not in maps.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, "torch never loaded"
        time.sleep(0.005)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert f"interrupted: perfsuite {argv[0]} stopped" in out


# A fresh interpreter runs `main(argv)` as the console script would, then says whether
# torch was imported (it took ~40 s under load before a bad argument was refused).
TORCH_FREE = """
import contextlib, io, json, sys
from perfsuite.cli import main
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
        code = main({argv!r})
    except SystemExit as exc:
        code = exc.code
print(json.dumps([code, "torch" in sys.modules, err.getvalue(), out.getvalue()]))
"""

REPORTS = Path(__file__).resolve().parents[1] / "reports"
SMOKE = str(REPORTS / "cpu-smoke" / "results.json")
BAD_ARGUMENTS = [
    ["run", "--samples", "0"],
    ["sweep", "--samples", "0"],
    ["methods", "--bogus"],
    ["merge", "a.json"],
    ["report", SMOKE, "--format", "nope"],
    ["plot", SMOKE],
    ["compare", SMOKE, SMOKE, "--metric", "mode"],
    ["baseline", "update"],
    ["bisect", "--good", "HEAD"],
    ["step", "--samples", "0"],
    ["history", "nope"],
    ["dashboard"],
    ["workload", "train", "--steps", "0"],
    ["sensitivity", "--samples", "1"],
    ["converge", "--steps", "0"],
    ["filtering", "--out", "x", "--orders", "nope"],
    ["kernel-report", "--kernel", "nope"],
]


def _torch_free(argv: list[str], cwd: Path) -> tuple[int, bool, str, str]:
    """(exit code, whether torch was imported, stderr, stdout)."""
    done = subprocess.run(
        [sys.executable, "-c", TORCH_FREE.format(argv=argv)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return tuple(json.loads(done.stdout))


@pytest.mark.parametrize("argv", BAD_ARGUMENTS, ids=[a[0] for a in BAD_ARGUMENTS])
@pytest.mark.integration
def test_bad_arguments_are_refused_before_torch_loads(argv, tmp_path):
    """Every command that imported torch to build its parser did so before refusing a bad
    argument (issue 46): the refusal comes first."""
    code, torch, err, _ = _torch_free(argv, tmp_path)
    assert code == 2 and err.startswith("error: "), (code, err)
    assert not torch, f"perfsuite {' '.join(argv)} imported torch"


@pytest.mark.integration
def test_compare_and_history_read_rows_without_torch(tmp_path):
    """compare and history judge rows already measured: no torch (report on 24 rows took
    13-25 s under load, issue 46)."""
    assert _torch_free(["compare", SMOKE, SMOKE], tmp_path)[:2] == (0, False)
    demo = tmp_path / "demo"
    assert main(["history", "demo", "-o", str(demo), "--runs", "4", "--step-at", "2"]) == 0
    db = str(tmp_path / "h.sqlite")
    assert _torch_free(["history", "--db", db, "import", str(demo)], tmp_path)[:2] == (0, False)
    assert _torch_free(["history", "--db", db, "list"], tmp_path)[:2] == (0, False)
    assert _torch_free(["history", "--db", db, "check"], tmp_path)[1] is False


@pytest.mark.integration
def test_report_reads_a_runs_record_without_torch(tmp_path, capsys):
    """The tables' ‡ (gradients in the forward) is each method's capability: a results
    file records it as run writes it (``env.grads_in_forward``), so report reads the file
    without importing every method and torch, and prints what the registry would."""
    from perfsuite.plan.registry import all_methods
    from perfsuite.results.recorded import grads_in_forward_record

    document = json.loads(Path(SMOKE).read_text())
    plan = document["env"]["plan"]
    record = grads_in_forward_record(all_methods(), plan["methods"], plan["betas"])
    assert record["torch-native"] == {"0.0": True, "0.1": False}  # chunked only at β = 0
    document["env"]["grads_in_forward"] = record
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps(document))
    for fmt in ("md", "csv"):
        assert main(["report", SMOKE, "--format", fmt]) == 0  # no record: the registry
        code, torch, err, out = _torch_free(["report", str(recorded), "--format", fmt], tmp_path)
        assert (code, torch, err) == (0, False, "")
        assert out == capsys.readouterr().out and "‡" in out
