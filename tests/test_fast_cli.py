"""The command line imports a subcommand's modules only when it runs: `perfsuite --help`
and `perfsuite shapes` import no torch (they took 3.4 s, torch and every subcommand's
module imported to build the parser)."""

from __future__ import annotations

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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.integration
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps")
def test_an_interrupt_while_the_command_loads_exits_130_without_a_traceback(signum, tmp_path):
    """Ctrl-C 1-3 s into `sweep`, while its modules still loaded, printed a KeyboardInterrupt
    traceback (issue 46): the signal goes the moment torch's library is mapped, in the middle
    of `import torch` (about a second in on a quiet 2-core machine)."""
    argv = ["sweep", "--tokens", "64", "--vocab", "64", "--hidden", "32", "--dtype", "fp32",
            "--methods", "eager", "--beta", "0", "--samples", "1", "--out", "s.json"]  # fmt: skip
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
    assert "interrupted: perfsuite sweep stopped" in out
