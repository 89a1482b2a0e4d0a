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


def _help_argvs() -> list[list[str]]:
    """Every (sub-)subcommand's ``--help`` argv, from the parser itself."""

    from perfsuite.cli import build_parser

    argvs = [[]]
    for name, sub in _subparsers(build_parser()).items():
        argvs.append([name])
        argvs += [[name, inner] for inner in _subparsers(sub)]
    return [[*argv, "--help"] for argv in argvs]


def _subparsers(parser) -> dict:
    import argparse

    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def test_every_help_works_and_fits_80_columns(monkeypatch, capsys):
    """`perfsuite --help`'s usage line listed every command: 162 columns (issue 46); and
    argparse expands '%' in help strings: a bare one is a traceback on --help."""
    monkeypatch.setenv("COLUMNS", "80")
    argvs = _help_argvs()
    assert ["workload", "train", "--help"] in argvs and len(argvs) > 25
    wide = {}
    for argv in argvs:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0, argv
        lines = capsys.readouterr().out.splitlines()
        assert lines and lines[0].startswith(" ".join(["usage: perfsuite", *argv[:-1]])), argv
        wide.update({" ".join(argv): line for line in lines if len(line) > 80})
    assert not wide, wide
