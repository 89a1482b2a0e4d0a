"""Bad input, for every command, as a user types it: one ``error:`` line on stderr,
nothing on stdout, exit status 2, and nothing written or changed on disk.

Placeholders in an argv: ``{T}`` a scratch folder (the working directory too), ``{M}`` a
folder that does not exist, ``{F}`` a plain file, ``{J}`` a file that is not JSON,
``{R}`` a copy of a committed results file, ``{G}`` a committed sweep's results."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from perfsuite.cli import main
from perfsuite.parser import MODULE_COMMANDS

REPORTS = Path(__file__).resolve().parents[1] / "reports"
SMOKE = REPORTS / "cpu-smoke" / "results.json"
GRID = REPORTS / "cpu-sweep-small" / "results.json"
TINY = ["--tokens", "16", "--vocab", "64", "--hidden", "8"]

# command -> bad invocations (argv after the command; a dict adds environment variables)
CASES: dict[str, list[list[str] | tuple[list[str], dict[str, str]]]] = {
    "run": [
        ["--methods", "nosuch"],
        ["--shape", "nope"],
        ["--shape", ","],
        ["--tokens", "-3"],
        ["--beta", "2"],
        ["--phases", "sideways"],
        ["--softcap", "nan"],
        ["--samples", "x"],
        ["--memory-limit", "1", "--device", "cpu"],
        ["--memory-limit", "lots"],
        ["--tokens", "100000000", "--shape", "gemma2-9b", "--device", "cpu"],
        ["--tp", "0"],
        ["--workload", "{M}/e.safetensors"],
        ["--out", "{F}/r.json"],
        ["--methods", "eager", "--out", "{R}"],
    ],
    "sweep": [
        [*TINY, "--methods", "nosuch"],
        ["--tokens", "x"],
        [*TINY, "--beta", "2"],
        [*TINY, "--out", "{F}/s.json"],
        [*TINY, "--resume"],
        [*TINY, "--redo", "error"],
        [*TINY, "--shard", "3/3"],
    ],
    "step": [
        ["--model", "nope"],
        ["--layers", "0"],
        ["--samples", "0"],
        ["--memory-limit", "lots"],
        ["--methods", "nosuch"],
        ["--beta", "x"],
        ["--out", "{F}/st.json"],
    ],
    "converge": [
        ["--steps", "0"],
        ["--preset", "nope"],
        ["--methods", "nosuch"],
        ["--beta", "2"],
        ["--dtype", "fp8"],
        ["--data", "poems"],
        ["--out", "{F}/c.json"],
        ["--render", "{M}/c.json"],
    ],
    "shapes": [["extra"], ["--no-such-option"]],
    "methods": [
        ["--tp", "x"],
        ["--bogus"],
        ([], {"PERFSUITE_PLUGINS": "no_such_plugin_module"}),
    ],
    "report": [
        ["{M}/r.json"],
        ["{J}"],
        ["{R}", "--format", "pdf"],
        ["{R}", "-o", "{R}"],
        ["{R}", "-o", "{F}/t.md"],
        ["{R}", "--paper", "{M}/paper.csv"],
    ],
    "plot": [
        ["{M}/r.json", "-o", "{T}/plots"],
        ["{J}", "-o", "{T}/plots"],
        ["{G}", "-o", "{T}/plots", "--dpi", "1e5"],
        ["{G}", "-o", "{T}/plots", "--phase", "sideways"],
        ["{G}", "-o", "{F}/plots"],
    ],
    "merge": [
        [],
        ["{M}/r.json", "-o", "{T}/m.json"],
        ["{J}", "-o", "{T}/m.json"],
        ["{R}", "--duplicates", "maybe", "-o", "{T}/m.json"],
        ["{R}", "-o", "{F}/m.json"],
        ["{R}", "-o", "{R}"],
    ],
    "compare": [
        [],
        ["{R}", "{M}/r.json"],
        ["{R}", "{J}"],
        ["{R}", "{R}", "--metric", "mode"],
        ["{R}", "{R}", "--alpha", "2"],
        ["{R}", "{R}", "--time-threshold", "-1"],
    ],
    "baseline": [
        [],
        ["update"],
        ["update", "{M}/r.json", "--root", "{T}/bl"],
        ["update", "{J}", "--root", "{T}/bl"],
        ["update", "{R}", "--root", "{F}"],
        ["list", "--root", "{R}"],
    ],
    "bisect": [
        [],
        ["--good", "HEAD", "--bad", "HEAD", "--repo", "{M}", "--command", "true"],
        ["--good", "HEAD~1", "--bad", "HEAD", "--repo", "{T}", "--command", "true"],
        ["--good", "a", "--bad", "b", "--samples", "0", "--command", "true"],
        ["--good", "a", "--bad", "b", "--phase", "sideways"],
    ],
    "sensitivity": [
        ["--slowdowns", "abc"],
        ["--method", "nope"],
        ["--runs", "0"],
        ["--samples", "0"],
        ["--reanalyse", "{M}/s.json"],
        ["--reanalyse", "{R}"],
    ],
    "history": [
        [],
        ["nope"],
        ["add", "--db", "{T}/h.sqlite", "{M}/r.json"],
        ["add", "--db", "{T}/h.sqlite", "{J}"],
        ["list", "--db", "{J}"],
        ["sensitivity", "--cells", "-1"],
        ["sensitivity", "--trials", "0"],
        ["demo", "--runs", "0", "-o", "{T}/demo"],
        ["demo", "--runs", "1000000", "-o", "{T}/demo"],
    ],
    "dashboard": [
        ["--db", "{M}/h.sqlite", "-o", "{T}/site"],
        ["--db", "{J}", "-o", "{T}/site"],
        ["--bogus"],
    ],
    "workload": [
        [],
        ["inspect", "{M}/e.safetensors"],
        ["inspect", "{J}"],
        ["nope"],
    ],
    "filtering": [
        ["--workload", "{M}/e.safetensors", "--out", "{T}/f"],
        ["--vocab", "0", "--out", "{T}/f"],
        ["--thresholds", "2", "--out", "{T}/f"],
        ["--dtype", "fp8"],
        [*TINY, "--out", "{F}/f"],
    ],
    "kernel-report": [
        ["--arch", "sm_1"],
        ["--jobs", "x"],
        ["--bogus"],
    ],
}

PARAMS = [
    pytest.param(command, *(case if isinstance(case, tuple) else (case, {})), id=f"{command}-{i}")
    for command, cases in CASES.items()
    for i, case in enumerate(cases)
]


def test_the_table_covers_every_command():
    assert set(CASES) == {"run", "shapes", "methods", *(name for name, _, _ in MODULE_COMMANDS)}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("command", "argv", "env"), PARAMS)
def test_bad_input_is_one_error_line_and_exit_2(command, argv, env, tmp_path, monkeypatch, capsys):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    plain, not_json, results = scratch / "afile", scratch / "notjson.json", scratch / "r.json"
    plain.write_text("not a folder")
    not_json.write_text("{ this is not json")
    shutil.copyfile(SMOKE, results)
    places = dict(T=scratch, M=tmp_path / "missing", F=plain, J=not_json, R=results, G=GRID)
    filled = [command, *(a.format(**places) for a in argv)]
    monkeypatch.chdir(scratch)  # a default output lands here, and is caught below
    monkeypatch.setenv("PERFSUITE_HISTORY_DB", str(scratch / "default.sqlite"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    before = _files(scratch)
    try:
        code = main(filled)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    said = f"{' '.join(filled)}\n--- stdout:\n{out}--- stderr:\n{err}"
    assert code == 2, said
    assert out == "", said
    assert err.startswith("error: ") and err.count("\n") == 1, said
    assert _files(scratch) == before, said  # nothing written, nothing changed
