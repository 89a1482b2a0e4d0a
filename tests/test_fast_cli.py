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

# A fresh interpreter runs each argv in turn as the console script would and prints, for
# each, its exit code, the heavy modules loaded by then (so the first command to load one
# is the one named), its stderr and its stdout.
FRESH = """
import contextlib, io, json, sys
from perfsuite.cli import main
heavy = ("torch", "numpy", "perfsuite.plan.registry", "perfsuite.regress.compare")
for argv in {argvs!r}:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    loaded = [m for m in heavy if m in sys.modules]
    print(json.dumps([code, loaded, err.getvalue(), out.getvalue()]))
"""


def _fresh(argvs: list[list[str]], cwd: Path | None = None) -> list[tuple]:
    """(exit code, heavy modules loaded, stderr, stdout) of each argv, in one interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", FRESH.format(argvs=argvs)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [tuple(json.loads(line)) for line in done.stdout.splitlines()]


@pytest.mark.integration
def test_help_and_shapes_import_no_torch():
    argvs = [["--help"], ["shapes"], ["--version"]]
    expected = ["kernel-report", "gemma2-2b", "perfsuite"]
    for argv, expect, (code, heavy, _, out) in zip(argvs, expected, _fresh(argvs), strict=True):
        assert (code, heavy) == (0, []) and expect in out, (argv, code, heavy)


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


@pytest.mark.integration
def test_bad_arguments_are_refused_before_torch_loads(tmp_path):
    """Every command that imported torch to build its parser did so before refusing a bad
    argument (issue 46): the refusal comes first (it took ~40 s under load)."""
    ran = _fresh(BAD_ARGUMENTS, tmp_path)
    for argv, (code, heavy, err, _) in zip(BAD_ARGUMENTS, ran, strict=True):
        assert code == 2 and err.startswith("error: "), (argv, code, err)
        assert "torch" not in heavy, f"perfsuite {' '.join(argv)} imported torch"


@pytest.mark.integration
def test_compare_and_history_read_rows_without_torch(tmp_path):
    """compare and history judge rows already measured: no torch (report on 24 rows took
    13-25 s under load, issue 46)."""
    demo, db = tmp_path / "demo", str(tmp_path / "h.sqlite")
    assert main(["history", "demo", "-o", str(demo), "--runs", "4", "--step-at", "2"]) == 0
    history = [["import", str(demo)], ["list"], ["check"]]
    argvs = [["compare", SMOKE, SMOKE], *(["history", "--db", db, *a] for a in history)]
    ran = _fresh(argvs, tmp_path)
    assert [code for code, *_ in ran[:3]] == [0, 0, 0]  # check: 1 on an open regression
    assert not [heavy for _, heavy, *_ in ran if "torch" in heavy]


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
    formats = ["md", "csv"]
    ran = _fresh([["report", str(recorded), "--format", fmt] for fmt in formats], tmp_path)
    for fmt, (code, heavy, err, out) in zip(formats, ran, strict=True):
        assert main(["report", SMOKE, "--format", fmt]) == 0  # no record: the registry
        assert (code, "torch" in heavy, err) == (0, False, "")
        assert out == capsys.readouterr().out and "‡" in out
