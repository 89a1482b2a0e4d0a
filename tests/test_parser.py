"""Every parser error of every command is one line (issue 30): argparse printed a 3-7
line usage block first, under a prefix that changed with the command."""

from __future__ import annotations

import pytest

from perfsuite.cli import MODULE_COMMANDS, main

COMMANDS = ["run", "shapes", "methods", *(name for name, _, _ in MODULE_COMMANDS)]
# Commands whose parser wants a sub-subcommand first: an unknown option is reported
# by it (a missing COMMAND), still under its own name.
CASES = [([command, "--no-such-option"], f"perfsuite {command}") for command in COMMANDS]
CASES += [
    ([], "perfsuite"),
    (["nope"], "perfsuite"),
    (["run", "--samples", "x"], "perfsuite run"),
    (["compare"], "perfsuite compare"),
    (["compare", "a.json", "b.json", "--metric", "mode"], "perfsuite compare"),
    (["history"], "perfsuite history"),
    (["history", "nope"], "perfsuite history"),
    (["history", "list", "--no-such-option"], "perfsuite history list"),
    (["history", "--db", "x.sqlite", "add"], "perfsuite history add"),
    (["history", "check", "--metric", "speed"], "perfsuite history check"),
    (["baseline", "update"], "perfsuite baseline update"),
    (["baseline", "list", "--root"], "perfsuite baseline list"),
    (["kernel-report", "--jobs", "x"], "perfsuite kernel-report"),
    (["converge", "--preset"], "perfsuite converge"),
]


@pytest.mark.parametrize(("argv", "prog"), CASES, ids=[" ".join(a) or "-" for a, _ in CASES])
def test_a_parser_error_is_one_error_line(argv, prog, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith("error: ") and err.endswith(f" (see {prog} --help)\n"), err
    assert "usage:" not in err


def test_help_is_plain_text_and_history_takes_db_either_side(tmp_path, capsys):
    """`baseline update --help` showed reST ``double backticks``; `history --db X import`
    was refused (--db worked only after the sub-subcommand)."""
    with pytest.raises(SystemExit) as exc:
        main(["baseline", "update", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "``" not in text and "reports/baselines/<device-slug>/<shape>.json" in text
    db = tmp_path / "h.sqlite"
    demo = tmp_path / "demo"
    assert main(["history", "demo", "-o", str(demo), "--runs", "4", "--step-at", "2"]) == 0
    assert main(["history", "--db", str(db), "import", str(demo)]) == 0
    capsys.readouterr()
    assert main(["history", "--db", str(db), "list"]) == 0
    assert capsys.readouterr().out.endswith("4 runs\n")
    assert main(["history", "--db", str(tmp_path / "none.sqlite"), "list", "--db", str(db)]) == 0
    assert capsys.readouterr().out.endswith("4 runs\n")  # the one after the subcommand wins
