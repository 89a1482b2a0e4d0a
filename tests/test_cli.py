"""The command line as a user types it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.args import parse_size
from perfsuite.cli import main
from perfsuite.plan.memory_model import floor_bytes
from perfsuite.plan.shapes import get_shape
from perfsuite.results.results import load_dataframe, load_results


@pytest.mark.integration
def test_run_prints_table_and_writes_results(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = "run --shape smoke --tokens 32 --vocab 300 --hidden 16 --methods eager --beta 0.1"
    code = main([*argv.split(), "--samples", "2", "--device", "cpu", "--out", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "lower bound" in text and "eager" in text and "β=0.1" in text
    df = load_dataframe(out)
    assert set(df["status"]) == {"ok"} and set(df["phase"]) == {"fwd", "bwd", "fwd+bwd"}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "--shape", "nope"], "unknown shape"),
        (["run", "--beta", "2"], "outside"),
        (["run", "--methods", "bogus"], "unknown method"),
        (["run", "--shape", "gemma2-9b", "--device", "cpu"], "N x V logits"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(argv, message, capsys):
    assert main(argv) == 2
    assert message in _error(capsys)


def _error(capsys) -> str:
    """The one ``error:`` line on stderr (stdout may hold what ran before it)."""
    out, err = capsys.readouterr()
    assert "error:" not in out, out
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.integration
def test_argparse_errors_exit_nonzero():
    proc = subprocess.run(
        [sys.executable, "-m", "perfsuite", "run", "--tokens", "-3"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "must be positive" in proc.stderr


def test_shapes_and_methods_list(capsys):
    assert main(["shapes"]) == 0
    assert "gemma2-2b" in capsys.readouterr().out
    assert main(["methods"]) == 0
    text = capsys.readouterr().out
    assert "torch-native" in text and "reference" in text


def test_parse_size():
    assert (
        parse_size("2G") == 2 << 30 and parse_size("512M") == 512 << 20 and parse_size("100") == 100
    )


@pytest.mark.integration
def test_smoke_peaks_eager_holds_logits_native_and_ours_stay_near_floor(tmp_path):
    """Issues 2 and 3's acceptance checks on the smoke preset as shipped, in one run (one
    worker a method): at β = 0 eager holds the logits and torch's chunked path stays near
    the floor; at β = 0.1 in fp32 ours holds dE + dC and little else (its default slice:
    a sixteenth of the vocabulary's logits, timed natively)."""
    out = tmp_path / "smoke.json"
    argv = "run --shape smoke --dtype fp32 --methods eager,torch-native,ours --beta 0,0.1"
    argv = [*argv.split(), "--phases", "fwd+bwd", "--samples", "3", "--out", str(out)]
    assert main(argv) == 0
    df = load_dataframe(out).set_index(["method", "beta"])
    s = get_shape("smoke")
    logits = s.tokens * s.vocab * 4
    floor = floor_bytes("fwd+bwd", s.tokens, s.vocab, s.hidden, "fp32")
    # Issue 2, β = 0. torch's chunked path holds dE and dC twice at its peak
    # (forward-computed gradients, then their copies scaled by grad_output): near the
    # floor, no logits.
    assert df.loc[("eager", 0.0), "peak_bytes"] >= 2 * logits
    assert floor <= df.loc[("torch-native", 0.0), "peak_bytes"] <= 2.2 * floor
    # Issue 3, β = 0.1.
    ours = df.loc[("ours", 0.1)]
    assert ours["status"] == "ok" and not bool(ours["interpreted"])
    assert bool(ours["deterministic"])
    assert floor <= ours["peak_bytes"] <= floor + logits / 16 + 0.02 * floor
    assert df.loc[("eager", 0.1), "peak_bytes"] >= 2 * logits
    # what report's ‡ reads instead of importing every method (issue 46)
    record = json.loads(out.read_text())["env"]["grads_in_forward"]
    # torch's chunked path computes the gradients in its forward at β = 0 only (with
    # smoothing it falls back to a path that does not).
    assert record == {
        "eager": {"0.0": False, "0.1": False},
        "torch-native": {"0.0": True, "0.1": False},
        "ours": {"0.0": False, "0.1": False},
    }, record


REPORTS = Path(__file__).resolve().parents[1] / "reports"
CHEAP = ["run", "--shape", "smoke", "--methods", "eager", "--phases", "fwd", "--samples", "2"]


@pytest.mark.parametrize("kind", ["existing", "directory", "file-as-parent"])
def test_unusable_out_is_refused_before_measuring(tmp_path, capsys, kind):
    out = {
        "existing": tmp_path / "old.json",
        "directory": tmp_path,
        "file-as-parent": tmp_path / "plain.txt" / "r.json",
    }[kind]
    if kind == "existing":
        out.write_text("keep me")
    if kind == "file-as-parent":
        out.parent.write_text("not a folder")
    assert main([*CHEAP, "--out", str(out)]) == 2
    out_text, err = capsys.readouterr()
    assert "--out" in err and err.count("\n") == 1
    assert "eager" not in out_text + err  # refused up front: nothing ran
    if kind == "existing":
        assert out.read_text() == "keep me"


@pytest.fixture(scope="module")
def cheap_run(tmp_path_factory) -> tuple[Path, str]:
    """One cheap run for the tests below (the same command, the same inputs): over an
    existing file with --force, under umask 022, the shape named twice; its file and its
    console output."""
    out = tmp_path_factory.mktemp("cheap") / "r.json"
    out.write_text("old")
    old, printed = os.umask(0o022), io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            code = main([*CHEAP, "--shape", "smoke, smoke", "--out", str(out), "--force"])
    finally:
        os.umask(old)
    assert code == 0, printed.getvalue()
    return out, printed.getvalue()


@pytest.mark.integration
def test_force_overwrites_and_the_file_follows_the_umask(cheap_run):
    out, _ = cheap_run
    assert load_results(out)["rows"] and (out.stat().st_mode & 0o777) == 0o644


@pytest.mark.integration
def test_repeated_shapes_run_once(cheap_run, tmp_path):
    rows = load_results(cheap_run[0])["rows"]
    assert len(rows) == 2  # eager × β ∈ {0, 0.1} × fwd, not doubled
    assert main([*CHEAP, "--shape", ",", "--out", str(tmp_path / "x.json")]) == 2


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_non_finite_softcap_is_a_one_line_error(capsys, value):
    assert main([*CHEAP, "--softcap", value]) == 2
    assert "--softcap" in _error(capsys)


def _subcommands() -> list[str]:
    from perfsuite.cli import MODULE_COMMANDS

    return ["run", "shapes", "methods", *(name for name, _, _ in MODULE_COMMANDS)]


@pytest.mark.parametrize("command", _subcommands())
def test_every_subcommand_help_works(capsys, command):
    """argparse expands '%' in help strings: a bare one is a traceback on --help."""
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert f"perfsuite {command}" in capsys.readouterr().out


@pytest.mark.integration
def test_progress_lines_carry_no_source_path(cheap_run):
    assert "eager" in cheap_run[1] and "cli.py:" not in cheap_run[1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sensitivity", "--slowdowns", "abc"], "--slowdowns"),
        (["sensitivity", "--method", "ours-tiles"], "interpreter"),
        (["sensitivity", "--method", "nope"], "no such method"),
        (
            ["sensitivity", "--reanalyse", str(REPORTS / "cpu-smoke/results.json")],
            "not a file written",
        ),
        (["sensitivity", "--quick", "--out", str(REPORTS)], "is a folder; give a file name"),
    ],
)
def test_sensitivity_bad_input_is_one_line(capsys, argv, message):
    try:
        code = main(argv)
    except SystemExit as stop:  # refused by argparse (a value's type)
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_sensitivity_cuda_without_a_gpu(capsys):
    assert main(["sensitivity", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_unknown_plugin_and_absurd_dpi(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("PERFSUITE_PLUGINS", "no_such_plugin_module")
    assert main(["methods"]) == 2
    assert "no_such_plugin_module" in _error(capsys)
    monkeypatch.delenv("PERFSUITE_PLUGINS")
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "plot",
                str(REPORTS / "cpu-sweep-small/results.json"),
                "-o",
                str(tmp_path),
                "--dpi",
                "1e5",
            ]
        )
    assert exc.value.code == 2


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--timeout", "0", "finite number > 0"),
        ("--timeout", "nan", "finite number > 0"),
        ("--warmup", "-1", "0 or more"),
        ("--seed", "12345678901234567890", "2**32 - 1"),
        ("--seed", "-1", "0 or more"),
    ],
)
def test_measurement_protocol_values_are_checked(capsys, flag, value, message):
    with pytest.raises(SystemExit) as exc:
        main([*CHEAP, flag, value])
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--vocab", "256", "--entropy", "100"], "outside [0, log V = 5.55] nats for V=256"),
        (["--zipf", "nan"], "--zipf must be a finite number"),
        (["--entropy", "inf"], "--entropy must be a finite number"),
    ],
)
def test_impossible_synthetic_workloads_are_refused_before_any_worker(
    capsys, monkeypatch, extra, message
):
    """These used to reach the workers and come back as error rows."""
    monkeypatch.setattr("perfsuite.harness.kind.run_cases", lambda *a, **k: pytest.fail("ran"))
    assert main([*CHEAP, *extra]) == 2
    assert message in _said(capsys)


def _said(capsys) -> str:
    """The command's one error line."""
    return _error(capsys)


def _dump(path, targets=None, nan=False):
    import torch
    from safetensors.torch import save_file

    e = torch.randn(16, 8)
    if nan:
        e[3, 2] = float("nan")
    if targets is None:
        targets = torch.randint(0, 32, (16,))
    save_file({"e": e, "c": torch.randn(32, 8), "targets": targets}, str(path))
    return path


def test_workload_files_that_define_no_loss_are_refused(tmp_path, capsys):
    """An all-ignored or NaN dump used to give "loss error nan > tolerance nan"."""
    import torch

    ignored = _dump(tmp_path / "ignored.safetensors", targets=torch.full((16,), -100))
    assert main(["run", "--workload", str(ignored)]) == 2
    assert "every target is -100" in _said(capsys)
    assert main(["run", "--workload", str(_dump(tmp_path / "nan.safetensors", nan=True))]) == 2
    assert "e holds 1 NaN/inf value" in _said(capsys)
    half = torch.randint(0, 32, (16,))
    half[:4] = -100
    some = _dump(tmp_path / "half.safetensors", targets=half)
    assert main(["run", "--workload", str(some), "--tokens", "4"]) == 2
    assert "every target in those rows is -100" in _said(capsys)


def test_workload_file_and_shape_together_are_refused(tmp_path, capsys):
    """The file fixes the shape: --shape used to be ignored without a word."""
    dump = _dump(tmp_path / "d.safetensors")
    assert main(["run", "--shape", "smoke", "--workload", str(dump)]) == 2
    assert "--shape smoke with --workload" in _said(capsys)


def test_run_and_sweep_word_a_shape_too_big_alike(monkeypatch, capsys, tmp_path):
    """One memory model and one message: `run` said "needs ~20.1 GiB … has 22.6 GiB
    available" (a contradiction to read) and disagreed with `sweep`'s 41.1 GiB."""
    monkeypatch.setattr("perfsuite.plan.memory_model.available_memory", lambda: 20 * 2**30)
    assert main(["run", "--shape", "gemma2-9b", "--device", "cpu"]) == 2
    ran = _error(capsys)
    out = tmp_path / "s.json"
    argv = ["--tokens", "8192", "--vocab", "256000", "--hidden", "3584", "--methods", "eager"]
    # every cell skipped: nothing measured, so not a success (issue 20)
    assert main(["sweep", *argv, "--device", "cpu", "--out", str(out)]) == 1
    reason = load_results(out)["rows"][0]["reason"]
    words = reason.split("; --attempt-all")[0]
    assert words in ran and "predicted peak ~41.1 GiB" in words
    assert "exceeds the 16 GiB this cpu can give a cell" in words and "available" not in ran


# A sweep's grid: the smoke shape's cells, fp32.
SWEEP = ["sweep", "--tokens", "256", "--vocab", "2048", "--hidden", "128", "--dtype", "fp32"]


@pytest.mark.parametrize(
    ("cells", "how"), [(CHEAP[:3], "ctrl-c"), (CHEAP[:3], "sigterm"), (SWEEP, "sigterm")]
)
@pytest.mark.integration
def test_an_interrupted_command_keeps_its_finished_cells(tmp_path, cells, how):
    """Ctrl-C used to discard every finished cell; SIGTERM also left the worker's
    temporary folder behind and the terminal's cursor hidden, and a sweep said nothing of
    its file. One driver, one wording: run and sweep alike."""
    import json
    import signal
    import time

    out, tmp = tmp_path / "r.json", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "FORCE_COLOR": "1", "COLUMNS": "100"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfsuite", *cells, "--methods", "eager,torch-compile",
         "--phases", "fwd", "--samples", "2", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True,  # a process group of its own, as a terminal's job
        # Ctrl-C's default action, as in a terminal, even when the suite itself runs in
        # the background (`pytest &` in a script: the shell ignores SIGINT, children too).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while not (out.exists() and json.loads(out.read_text() or "{}").get("rows")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.1)
    if how == "ctrl-c":  # the terminal signals the whole foreground group
        os.killpg(proc.pid, signal.SIGINT)
    else:  # kill / scancel: the parent alone
        proc.send_signal(signal.SIGTERM)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, text
    kept = load_results(out)
    assert kept["rows"] and kept["env"].get("partial") is True
    plain = " ".join(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).split())
    assert f"{len(kept['rows'])} finished cell row(s) kept in {out}" in plain
    assert list(tmp.glob("perfsuite-*")) == []  # the worker's folder is gone with it
    assert text.rfind("\x1b[?25h") > text.rfind("\x1b[?25l") >= 0  # cursor shown again
    assert f"perfsuite {cells[0]} stopped" in plain


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "{R}", "-o", "{F}/t.md"],
        ["report", "{R}", "-o", "{D}"],
        ["merge", "{R}", "-o", "{F}/m.json"],
        ["merge", "{R}", "-o", "{D}"],
        ["plot", "{R}", "-o", "{F}/plots"],
        ["sweep", "--tokens", "8", "--vocab", "16", "--hidden", "8", "--out", "{D}"],
        ["sweep", "--tokens", "8", "--vocab", "16", "--hidden", "8", "--out", "{F}/s.json"],
    ],
)
def test_unwritable_outputs_are_one_line_errors(tmp_path, capsys, argv):
    """report/merge/plot used to print a traceback for a file as a folder or a directory;
    sweep called a directory an existing sweep to --resume."""
    plain = tmp_path / "plain.txt"
    plain.write_text("not a folder")
    results = REPORTS / "cpu-sweep-small/results.json"
    filled = [a.format(R=results, F=plain, D=tmp_path) for a in argv]
    assert main(filled) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    assert plain.read_text() == "not a folder"


def test_memory_limit_zero_is_refused_up_front(tmp_path, capsys):
    """--memory-limit 0 used to run, every cell oom with the allocator's words, exit 0."""
    out = tmp_path / "r.json"
    assert main([*CHEAP, "--memory-limit", "0", "--out", str(out)]) == 2
    assert "--memory-limit must be a size > 0" in _error(capsys)
    assert not out.exists()


def test_a_memory_limit_below_every_cells_predicted_peak_is_refused_up_front(tmp_path, capsys):
    """--memory-limit 1 (one byte) ran 55 s before every cell was oom."""
    out = tmp_path / "r.json"
    # the smoke shape's smallest cell: ~23.2 MiB
    for limit, said in (("1", "1 B"), ("1K", "1 KiB"), ("20M", "20 MiB")):
        assert main([*CHEAP, "--memory-limit", limit, "--device", "cpu", "--out", str(out)]) == 2
        refused = f"--memory-limit {said} is below the smallest cell's predicted peak, ~23.2 MiB"
        assert refused in _error(capsys)
        assert not out.exists()


@pytest.mark.parametrize(
    ("flag", "value"), [("--samples", "100000000000"), ("--warmup", "5000000")]
)
def test_absurd_sample_counts_are_bounded(tmp_path, capsys, flag, value):
    out = tmp_path / "r.json"
    assert main([*CHEAP, flag, value, "--out", str(out)]) == 2
    assert f"{flag} must be in [" in _error(capsys) and not out.exists()


@pytest.mark.integration
def test_a_run_where_every_cell_failed_exits_nonzero(tmp_path, capsys, fake_plugins):
    """Not only all-`error`: all-oom exited 0. The limit: 1 MiB over the memory model's
    peak (the cell's tensors), far under the worker's real one (allocator, threads).
    fake-hoards declares 400 logit copies: predicted over it, skipped, no worker;
    ``--attempt-all`` attempts it."""
    from perfsuite.plan.memory_model import gate_bytes

    s = get_shape("smoke")
    limit = gate_bytes(s.tokens, s.vocab, s.hidden, s.dtype) + 2**20
    out = tmp_path / "r.json"
    argv = [*CHEAP, "--beta", "0", "--memory-limit", str(limit), "--device", "cpu"]
    argv[argv.index("eager")] = "eager,fake-hoards"
    assert main([*argv, "--out", str(out)]) == 1
    out_text, err = capsys.readouterr()
    assert "oom" in out_text and "skipped" in out_text and "error:" not in out_text
    assert err.count("error:") == 1  # its last line, after any warning
    assert err.splitlines()[-1] == "error: no cell was measured (1 oom, 1 skipped)"
    rows = {r["method"]: r for r in load_results(out)["rows"]}
    assert rows["eager"]["status"] == "oom" and rows["fake-hoards"]["status"] == "skipped"
    assert "--attempt-all attempts it" in rows["fake-hoards"]["reason"]
    assert main([*argv, "--attempt-all", "--force", "--out", str(out)]) == 1
    assert {r["status"] for r in load_results(out)["rows"]} == {"oom"}  # both attempted


def test_ctrl_c_before_any_cell_says_nothing_was_written(tmp_path, capsys, monkeypatch):
    import perfsuite.run.runner as runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_plan", interrupted)
    out = tmp_path / "r.json"
    assert main([*CHEAP, "--out", str(out)]) == 130
    text = " ".join(capsys.readouterr().out.split())
    assert "before any cell finished: nothing written" in text
    assert "partial results file" not in text and not out.exists()


def test_help_shows_defaults_and_speaks_to_users(capsys):
    """Issue 20: no defaults for --beta, --phases, --samples, --warmup, --timeout; the
    top-level description was a developer docstring with reST markup."""
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag, default in [
        ("--beta", "0,0.1"),
        ("--phases", "fwd,bwd,fwd+bwd"),
        ("--samples", "20"),
        ("--warmup", "3"),
        ("--timeout", "3600"),
    ]:
        assert re.search(
            rf"{re.escape(flag)} [A-Z]+ [^[]{{0,80}}?\(default {re.escape(default)}\b", text
        ), flag
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "``" not in text and "perfsuite run --shape smoke" in text and "exit codes" in text


def test_shapes_says_a_softcap_applies_only_when_asked(capsys):
    assert main(["shapes"]) == 0
    text = capsys.readouterr().out
    assert "--softcap" in text.splitlines()[2] and "applied only with --softcap" in text


@pytest.mark.parametrize(
    "argv",
    [
        [*CHEAP, "--out", "{F}/r.json"],
        ["sweep", "--tokens", "8", "--vocab", "16", "--hidden", "8", "--out", "{F}/s.json"],
        ["report", "{R}", "-o", "{F}/t.md"],
        ["merge", "{R}", "-o", "{F}/m.json"],
        ["plot", "{R}", "-o", "{F}/plots"],
        ["converge", "--out", "{F}/c.json"],
        ["history", "demo", "-o", "{F}/demo"],
        ["dashboard", "--db", "{DB}", "-o", "{F}/site"],
        ["sensitivity", "--quick", "--out", "{F}/s.json"],
    ],
)
def test_a_file_as_the_outputs_folder_reads_alike_everywhere(tmp_path, capsys, argv):
    """Issue 20: "File exists" from run, sweep, report, converge, history demo;
    "Not a directory" from dashboard. One check, one wording."""
    plain = tmp_path / "afile"
    plain.write_text("not a folder")
    db = tmp_path / "h.sqlite"
    assert main(["history", "add", "--db", str(db), str(REPORTS / "cpu-smoke/results.json")]) == 0
    capsys.readouterr()
    results = REPORTS / "cpu-sweep-small/results.json"
    filled = [a.format(R=results, F=plain, DB=db) for a in argv]
    assert main(filled) == 2
    captured = capsys.readouterr()
    text = " ".join((captured.out + captured.err).split())
    assert f"{plain} is a file, not a folder" in text, text
    assert "Traceback" not in text and "File exists" not in text and "Not a directory" not in text
    assert plain.read_text() == "not a folder"


@pytest.mark.parametrize("flag", ["--attempt-all", None])
def test_sweep_attempt_all_is_its_own_flag(monkeypatch, capsys, tmp_path, flag):
    """Issue 30: `--force` meant "overwrite" to run and "attempt cells predicted not to
    fit" to sweep; sweep's is `--attempt-all`, and `--force` (an alias for a while,
    before any release) is no sweep option."""
    from perfsuite.plan.plan import PlanError

    seen = {}

    def stop(*args, **kwargs):
        seen.update(kwargs)
        raise PlanError("stopped before measuring")

    monkeypatch.setattr("perfsuite.run.sweep.Sweep", stop)
    argv = ["sweep", "--tokens", "16", "--vocab", "64", "--hidden", "8", "--methods", "eager"]
    argv += ["--device", "cpu", "--out", str(tmp_path / "s.json")]
    assert main(argv + ([flag] if flag else [])) == 2
    assert seen["force"] is (flag is not None) and "stopped before measuring" in _error(capsys)
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--force"])
    assert exc.value.code == 2 and "unrecognized arguments: --force" in _error(capsys)
