"""The command line as a user types it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfsuite.args import parse_size
from perfsuite.cli import build_parser, main
from perfsuite.parser import MODULE_COMMANDS
from perfsuite.plan.memory_model import floor_bytes
from perfsuite.plan.shapes import get_shape
from perfsuite.results.results import load_dataframe, load_results


def _error(capsys) -> str:
    """The one ``error:`` line on stderr (stdout may hold what ran before it)."""
    out, err = capsys.readouterr()
    assert "error:" not in out, out
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_shapes_and_methods_list(capsys):
    assert main(["shapes"]) == 0
    text = capsys.readouterr().out
    assert "gemma2-2b" in text and "applied only with --softcap" in text
    assert "--softcap" in text.splitlines()[2]
    assert main(["methods"]) == 0
    text = capsys.readouterr().out
    assert "torch-native" in text and "reference" in text


def test_softcap_bare_flag_takes_the_presets_and_a_value_is_a_number():
    parse = build_parser(["run"]).parse_args
    assert parse(["run", "--softcap", "--phases", "fwd"]).softcap is True
    assert parse(["run", "--softcap", "20"]).softcap == 20.0


def test_parse_size():
    assert parse_size("2G") == 2 << 30 and parse_size("512M") == 512 << 20
    assert parse_size("100") == 100


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


@pytest.mark.integration
def test_a_run_prints_its_table_and_writes_every_cell_once(cheap_run):
    out, printed = cheap_run
    assert "lower bound" in printed and "β=0.1" in printed
    assert "eager" in printed and "cli.py:" not in printed  # no source path in progress
    df = load_dataframe(out)
    assert set(df["status"]) == {"ok"} and set(df["phase"]) == {"fwd", "bwd", "fwd+bwd"}
    assert len(df) == 6  # eager × β ∈ {0, 0.1} × 3 phases: the repeated shape not doubled
    assert (out.stat().st_mode & 0o777) == 0o644  # --force overwrote it, under the umask


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_sensitivity_cuda_without_a_gpu(capsys):
    assert main(["sensitivity", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


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


def test_workload_files_that_define_no_loss_or_no_shape_are_refused(tmp_path, capsys):
    """An all-ignored or NaN dump used to give "loss error nan > tolerance nan"."""
    import torch

    ignored = _dump(tmp_path / "ignored.safetensors", targets=torch.full((16,), -100))
    assert main(["run", "--workload", str(ignored)]) == 2
    assert "every target is -100" in _error(capsys)
    assert main(["run", "--workload", str(_dump(tmp_path / "nan.safetensors", nan=True))]) == 2
    assert "e holds 1 NaN/inf value" in _error(capsys)
    half = torch.randint(0, 32, (16,))
    half[:4] = -100
    some = _dump(tmp_path / "half.safetensors", targets=half)
    assert main(["run", "--workload", str(some), "--tokens", "4"]) == 2
    assert "every target in those rows is -100" in _error(capsys)
    # The file fixes the shape: --shape used to be ignored without a word.
    assert main(["run", "--shape", "smoke", "--workload", str(some)]) == 2
    assert "--shape smoke with --workload" in _error(capsys)


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


# Each command with each signal once (one driver: the pair left out adds nothing).
@pytest.mark.parametrize(("cells", "how"), [(CHEAP[:3], "ctrl-c"), (SWEEP, "sigterm")])
@pytest.mark.integration
def test_an_interrupted_command_keeps_its_finished_cells(tmp_path, cells, how):
    """Ctrl-C used to discard every finished cell; SIGTERM also left the worker's
    temporary folder behind and the terminal's cursor hidden, and a sweep said nothing of
    its file. One driver, one wording: run and sweep alike."""
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
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "``" not in text and "perfsuite run --shape smoke" in text and "exit codes" in text
    text = " ".join(text.split())  # every subcommand with its line
    for name, _, help_text in MODULE_COMMANDS:
        assert f"{name} {' '.join(help_text.split())}" in text, name
    assert all(f" {name} " in text for name in ("run", "shapes", "methods"))


def test_sweep_attempt_all_is_its_own_flag(monkeypatch, capsys, tmp_path):
    """Issue 30: `--force` meant "overwrite" to run and "attempt cells predicted not to
    fit" to sweep; sweep's is `--attempt-all`, and `--force` is no sweep option."""
    from perfsuite.plan.plan import PlanError

    seen = []

    def stop(*args, **kwargs):
        seen.append(kwargs["force"])
        raise PlanError("stopped before measuring")

    monkeypatch.setattr("perfsuite.run.sweep.Sweep", stop)
    argv = ["sweep", "--tokens", "16", "--vocab", "64", "--hidden", "8", "--methods", "eager"]
    argv += ["--device", "cpu", "--out", str(tmp_path / "s.json")]
    for extra in ([], ["--attempt-all"]):
        assert main(argv + extra) == 2 and "stopped before measuring" in _error(capsys)
    assert seen == [False, True]
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--force"])
    assert exc.value.code == 2 and "unrecognized arguments: --force" in _error(capsys)
