"""Every subcommand driven through ``perfsuite.cli.main`` as a user types it, past
argparse into the command itself: a command whose own tests call its module's
``main`` could crash at the real entry point unseen (issue 20: bisect did)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfsuite.cli import MODULE_COMMANDS, main

REPORTS = Path(__file__).resolve().parents[1] / "reports"
SMOKE = str(REPORTS / "cpu-smoke" / "results.json")
GRID = str(REPORTS / "cpu-sweep-small" / "results.json")
TINY = ["--tokens", "16", "--vocab", "64", "--hidden", "8", "--methods", "eager"]
QUICK = ["--phases", "fwd", "--samples", "2", "--warmup", "0", "--device", "cpu"]


# Per subcommand: a real invocation ({T}: the test's folder); exit 0 unless in REFUSED.
ARGVS: dict[str, list[str]] = {
    "run": [],  # the session's cheap run instead (tests/conftest.py)
    "shapes": ["shapes"],
    "methods": ["methods"],
    "step": [],  # the session's smoke step run instead
    "sweep": ["sweep", *TINY, "--beta", "0", "--dtype", "fp32", *QUICK, "--out", "{T}/s.json"],
    "merge": ["merge", SMOKE, "-o", "{T}/m.json"],
    "report": ["report", SMOKE],
    "plot": ["plot", GRID, "-o", "{T}/plots", "--dpi", "20"],
    "compare": ["compare", SMOKE, SMOKE],
    "baseline": ["baseline", "list", "--root", str(REPORTS / "baselines")],
    # a bisection through main: tests/regress/test_bisect.py
    "bisect": ["bisect", "--repo", "{T}", "--good", "HEAD~1", "--bad", "HEAD", "--command", "true"],
    "sensitivity": ["sensitivity", "--reanalyse",
                    str(REPORTS / "sensitivity" / "cpu-eager-smoke.json")],
    "converge": ["converge", "--dry-run"],
    "history": ["history", "list", "--db", "{T}/history.sqlite"],
    "dashboard": ["dashboard", "--db", "{T}/history.sqlite", "-o", "{T}/site"],
    "kernel-report": ["kernel-report", "--arch", "sm_1"],
    "workload": ["workload", "inspect", str(REPORTS / "filtering" / "trained-v16k.safetensors")],
    "filtering": ["filtering", "--workload", "{T}/missing.safetensors", "--out", "{T}/f"],
}  # fmt: skip
REFUSED = {"bisect", "kernel-report", "filtering"}  # past argparse to the command's own refusal


def test_the_table_names_every_subcommand():
    assert set(ARGVS) == {"run", "shapes", "methods", *(name for name, _, _ in MODULE_COMMANDS)}


@pytest.mark.parametrize("command", list(ARGVS))
@pytest.mark.integration
def test_every_subcommand_runs_from_the_entry_point(command, tmp_path, capsys, request):
    if command in ("history", "dashboard"):  # a database to read
        demo = tmp_path / "demo"
        assert main(["history", "demo", "-o", str(demo), "--runs", "8", "--step-at", "4"]) == 0
        assert main(["history", "import", str(demo), "--db", str(tmp_path / "history.sqlite")]) == 0
        capsys.readouterr()
    if command == "run":  # the session's runs, typed through main (tests/conftest.py)
        text = request.getfixturevalue("cheap_run")[1]
    elif command == "step":
        ran = request.getfixturevalue("smoke_run")
        assert ran.code == 0, ran.out + ran.err
        text = ran.out + ran.err
    else:
        argv = [a.format(T=tmp_path) for a in ARGVS[command]]
        assert main(argv) == (2 if command in REFUSED else 0)
        out = capsys.readouterr()
        text = out.out + out.err
    assert "Traceback" not in text and text.strip()
    # Issue 30: rich padded every line to the width in a file or a pipe.
    padded = [line for line in text.splitlines() if line.endswith(" ")]
    assert not padded, padded[:3]
