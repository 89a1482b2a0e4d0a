"""Bad input, for every command, as a user types it: one ``error:`` line on stderr
(saying what the case gives, where it gives it), nothing on stdout, exit status 2, no
process started (the suite's guard) and nothing written or changed on disk. Parser
errors' own wording: tests/test_parser.py.

Placeholders in an argv: ``{T}`` a scratch folder (the working directory too), ``{M}`` a
folder that does not exist, ``{F}`` a plain file, ``{J}`` a file that is not JSON,
``{R}`` a copy of a committed results file, ``{G}`` a committed sweep's results, ``{H}``
a history database holding ``{R}``."""

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
CELL = ["--shape", "smoke", "--methods", "eager", "--phases", "fwd"]  # smallest: ~23.2 MiB
FILE = "{F} is a file, not a folder"  # one check, one wording for every outputs folder
BELOW = "is below the smallest cell's predicted peak, ~23.2 MiB"
KREPORT = ["--arch", "sm_90a", "--dtype", "bf16", "--no-cce"]

# command -> bad invocations: argv after the command, or (argv, what the error line says),
# or (argv, environment variables, what it says)
Case = list[str] | tuple[list[str], str] | tuple[list[str], dict[str, str], str]
CASES: dict[str, list[Case]] = {
    "run": [
        (["--methods", "nosuch"], "unknown method"),
        (["--shape", "nope"], "unknown shape"),
        ["--shape", ","],
        (["--tokens", "-3"], "must be positive"),
        (["--beta", "2"], "outside"),
        ["--phases", "sideways"],
        *((["--softcap", value], "--softcap") for value in ("nan", "inf", "-1", "0")),
        ["--samples", "x"],
        (["--samples", "100000000000"], "--samples must be in ["),
        (["--warmup", "5000000"], "--warmup must be in ["),
        (["--warmup", "-1"], "0 or more"),
        (["--timeout", "0"], "finite number > 0"),
        (["--timeout", "nan"], "finite number > 0"),
        (["--seed", "12345678901234567890"], "2**32 - 1"),
        (["--seed", "-1"], "0 or more"),
        (["--memory-limit", "0"], "--memory-limit must be a size > 0"),
        ([*CELL, "--memory-limit", "1", "--device", "cpu"], f"--memory-limit 1 B {BELOW}"),
        ([*CELL, "--memory-limit", "1K", "--device", "cpu"], f"--memory-limit 1 KiB {BELOW}"),
        ([*CELL, "--memory-limit", "20M", "--device", "cpu"], f"--memory-limit 20 MiB {BELOW}"),
        ["--memory-limit", "lots"],
        (["--shape", "gemma2-9b", "--device", "cpu"], "N x V logits"),
        ["--tokens", "100000000", "--shape", "gemma2-9b", "--device", "cpu"],
        # impossible synthetic workloads: they used to reach the workers as error rows
        ([*CELL, "--vocab", "256", "--entropy", "100"], "outside [0, log V = 5.55] nats for V=256"),
        ([*CELL, "--zipf", "nan"], "--zipf must be a finite number"),
        ([*CELL, "--entropy", "inf"], "--entropy must be a finite number"),
        ([*CELL, "--workload", "random", "--zipf", "1"], "shape the synthetic workload, not"),
        ["--tp", "0"],
        ["--workload", "{M}/e.safetensors"],
        (["--out", "{F}/r.json"], FILE),
        (["--methods", "eager", "--out", "{R}"], "--out"),
        ([*CELL, "--out", "{T}"], "--out"),
    ],
    "sweep": [
        [*TINY, "--methods", "nosuch"],
        ["--tokens", "x"],
        [*TINY, "--beta", "2"],
        ([*TINY, "--out", "{F}/s.json"], FILE),
        ([*TINY, "--out", "{T}"], "--out"),  # not an existing sweep to --resume
        [*TINY, "--resume"],
        [*TINY, "--redo", "error"],
        [*TINY, "--shard", "3/3"],
    ],
    "step": [
        (["--model", "gpt5"], "unknown model 'gpt5'"),
        ["--layers", "0"],
        (["--layers", "two"], "--layers: not an integer"),
        (["--model", "llama3.2-1b", "--layers", "17"], "llama3.2-1b has 16 layers"),
        (["--seq", "1"], "--seq must be >= 2"),
        (["--model", "gemma2-2b", "--seq", "9000"], "at most 8192 positions"),
        (["--dtype", "fp16"], "--dtype: unknown fp16"),
        (["--beta", "1.5"], "--beta: 1.5 is outside [0, 1]"),
        (["--timeout", "nan"], "--timeout"),
        ["--samples", "0"],
        ["--memory-limit", "lots"],
        ["--methods", "nosuch"],
        ["--beta", "x"],
        (["--out", "{F}/st.json"], FILE),
    ],
    "converge": [
        (["--steps", "0"], "--steps: must be positive, got 0"),
        (["--steps", "x"], "--steps: not an integer"),
        (["--preset", "nope"], "--preset: invalid choice: 'nope'"),
        (["--methods", "eager,nosuch"], "unknown method(s) nosuch"),
        (["--beta", "1.5"], "--beta: 1.5 is outside [0, 1]"),
        (["--dtype", "fp8"], "--dtype: unknown fp8"),
        (["--data", "poems"], "--data: invalid choice: 'poems'"),
        (["--jobs", "0"], "--jobs: must be positive, got 0"),
        (["--timeout", "nan"], "--timeout: must be a finite number > 0, got 'nan'"),
        (["--z-loss", "-1"], "--z-loss: must be a finite number >= 0, got '-1'"),
        (["--z-loss", "big"], "--z-loss: not a number: 'big'"),
        (["--out", "{F}/c.json"], FILE),
        ["--render", "{M}/c.json"],
    ],
    "shapes": [["extra"]],
    "methods": [
        ["--tp", "x"],
        ([], {"PERFSUITE_PLUGINS": "no_such_plugin_module"}, "no_such_plugin_module"),
        ([], {"PERFSUITE_PLUGINS": "perfsuite.fit"}, "'perfsuite.fit' has no METHODS list"),
    ],
    "report": [
        ["{M}/r.json"],
        ["{J}"],
        ["{R}", "--format", "pdf"],
        ["{R}", "-o", "{R}"],
        (["{R}", "-o", "{F}/t.md"], FILE),
        ["{R}", "-o", "{T}"],
        ["{R}", "--paper", "{M}/paper.csv"],
    ],
    "plot": [
        ["{M}/r.json", "-o", "{T}/plots"],
        ["{J}", "-o", "{T}/plots"],
        ["{G}", "-o", "{T}/plots", "--dpi", "1e5"],
        ["{G}", "-o", "{T}/plots", "--phase", "sideways"],
        (["{G}", "-o", "{F}/plots"], FILE),
    ],
    "merge": [
        [],
        ["{M}/r.json", "-o", "{T}/m.json"],
        ["{J}", "-o", "{T}/m.json"],
        ["{R}", "--duplicates", "maybe", "-o", "{T}/m.json"],
        (["{R}", "-o", "{F}/m.json"], FILE),
        ["{R}", "-o", "{T}"],
        ["{R}", "-o", "{R}"],
    ],
    "compare": [
        ["{R}", "{M}/r.json"],
        ["{R}", "{J}"],
        ["{R}", "{R}", "--alpha", "2"],
        ["{R}", "{R}", "--time-threshold", "-1"],
    ],
    "baseline": [
        [],
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
        (["--slowdowns", "abc"], "--slowdowns"),
        (["--method", "nope"], "no such method"),
        (["--method", "ours-tiles"], "interpreter"),
        ["--runs", "0"],
        ["--samples", "0"],
        ["--reanalyse", "{M}/s.json"],
        (["--reanalyse", "{R}"], "not a file written"),
        (["--quick", "--out", "{T}"], "is a folder; give a file name"),
        (["--quick", "--out", "{F}/s.json"], FILE),
    ],
    "history": [
        ["add", "--db", "{T}/h.sqlite", "{M}/r.json"],
        ["add", "--db", "{T}/h.sqlite", "{J}"],
        ["list", "--db", "{J}"],
        (["sensitivity", "--cells", "-1"], "argument --cells: must be positive, got -1"),
        (["sensitivity", "--trials", "0"], "argument --trials: must be positive, got 0"),
        (["sensitivity", "--runs", "7"], "argument --runs: must be 8 or more, got 7"),
        (["sensitivity", "--run-noise", "nan"], "--run-noise: must be a finite number >= 0"),
        ["demo", "--runs", "0", "-o", "{T}/demo"],
        ["demo", "--runs", "1000000", "-o", "{T}/demo"],
        (["demo", "--runs", "3", "-o", "{T}/d"], "--runs: must be between 4 and 1000, got 3"),
        (["demo", "--step-at", "60", "-o", "{T}/d"], "--step-at 60: must be between 1 and"),
        (["demo", "--step-at", "0", "-o", "{T}/d"], "--step-at 0:"),
        (["demo", "--step", "-1", "-o", "{T}/d"], "--step -1:"),
        (["demo", "-o", "{F}/demo"], FILE),
    ],
    "dashboard": [
        ["--db", "{M}/h.sqlite", "-o", "{T}/site"],
        ["--db", "{J}", "-o", "{T}/site"],
        (["--db", "{H}", "-o", "{F}/site"], FILE),
        ["--db", "{H}", "-o", "{T}/site", "--commit-url", "https://x/commit"],
        ["--db", "{H}", "-o", "{T}/site", "--commit-url", "https://x/{{repo}}/{{sha}}"],
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
        ([*TINY, "--out", "{F}/f"], FILE),
    ],
    "kernel-report": [
        *(
            (["--arch", a], f"unsupported arch '{a}'")
            for a in ("sm_1", "sm_800", "sm_70", "sm_99x", "sm_120a", "sm100a")
        ),
        # issue 30: `--kernel nope` built nothing and exited 0 (a CI gate passed vacuously)
        (["--kernel", "nope"], "--kernel 'nope': unknown; known: forward, slices, backward"),
        (["--kernel", "forward,fwd"], "--kernel 'fwd': unknown; known: forward"),
        (["--dtype", "fp8"], "--dtype 'fp8': unknown; known: bf16, fp16, fp32"),
        ([*KREPORT, "--threshold", "-1"], "--threshold -1.0: must be a percentage >= 0"),
        ([*KREPORT, "--across-triton"], "add --baseline DIR"),
        ([*KREPORT, "--save", "{F}"], "--save {F}: is a file"),
        ([*KREPORT, "--kernel", "cce_backward"], "--kernel cce_backward with --no-cce builds"),
        # It said "no such folder" about a file that exists (issue 46).
        (
            [*KREPORT, "--baseline", "{F}"],
            "--baseline {F}: is a file; --baseline takes the folder `--save DIR` wrote",
        ),
    ],
}


def _unpacked(case: Case) -> tuple[list[str], dict[str, str], str]:
    """(argv, environment, what the error line says) of a case."""
    if isinstance(case, list):
        return case, {}, ""
    return case[0], case[1] if len(case) == 3 else {}, case[-1]


PARAMS = [
    pytest.param(command, *_unpacked(case), id=f"{command}-{i}")
    for command, cases in CASES.items()
    for i, case in enumerate(cases)
]


def test_the_table_covers_every_command():
    assert set(CASES) == {"run", "shapes", "methods", *(name for name, _, _ in MODULE_COMMANDS)}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("command", "argv", "env", "says"), PARAMS)
def test_bad_input_is_one_error_line_and_exit_2(
    command, argv, env, says, tmp_path, monkeypatch, capsys
):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    plain, not_json, results = scratch / "afile", scratch / "notjson.json", scratch / "r.json"
    plain.write_text("not a folder")
    not_json.write_text("{ this is not json")
    shutil.copyfile(SMOKE, results)
    places = dict(T=scratch, M=tmp_path / "missing", F=plain, J=not_json, R=results, G=GRID)
    places["H"] = db = tmp_path / "h.sqlite"
    if "{H}" in argv:
        assert main(["history", "add", "--db", str(db), str(SMOKE)]) == 0
        capsys.readouterr()
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
    assert says.format(**places) in err, said
    assert _files(scratch) == before, said  # nothing written, nothing changed
