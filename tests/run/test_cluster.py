"""perfsuite sweep --executor: a job array through submitit, driven end to end through
``perfsuite.cli.main`` with the local executor (real task processes); Slurm as far as a
machine without it goes (no sbatch; an sbatch that refuses the partition)."""

from __future__ import annotations

import contextlib
import io
import os
import textwrap
from pathlib import Path

import pytest

from perfsuite.cli import main
from perfsuite.results.results import load_results
from run.sweeping import RESUMES, refused, started

pytest.importorskip("submitit")

TINY = [
    "--tokens", "64", "--vocab", "256", "--hidden", "32", "--beta", "0,0.1",
    "--methods", "breaks-at-smoothing", "--dtype", "fp32", "--device", "cpu",
    "--samples", "2", "--warmup", "0",
]  # fmt: skip
PHASES = 3
# Two units, β=0 then β=0.1: shard 0 holds the one, shard 1 (the one that breaks) the other.
# One method: a worker a shard (each task is a fresh Python, torch imported, already).
ARRAY = ["--executor", "local", "--shards", "2", "--array-parallelism", "2"]

PLUGIN = '''
"""A method that breaks the sweep process itself (not its worker) at β > 0 while
CLUSTER_TEST_BREAK is set: the array task of that shard raises."""
import os

from perfsuite.baselines.torch_methods import eager_loss
from perfsuite.method import Capabilities, SimpleMethod
from perfsuite.results import provenance

if os.environ.get("SUBMITIT_EXECUTOR"):
    # Array tasks are fresh processes, started minutes apart on a cluster: pin the code's
    # identity here, so that edits landing in this checkout mid-test leave the parts
    # mergeable (merge rightly refuses parts measured from different code).
    provenance.git_state = lambda: {"sha": "pinned", "dirty": False}


def _eager(case, c):
    return lambda e, c, t: eager_loss(e, c, t, case.beta, case.softcap)


class BreaksAtSmoothing(SimpleMethod):
    def unsupported_reason(self, case):
        if case.beta > 0 and os.environ.get("CLUSTER_TEST_BREAK"):
            raise RuntimeError("deliberate failure in the shard at beta > 0")
        return super().unsupported_reason(case)


METHODS = [
    BreaksAtSmoothing(
        "breaks-at-smoothing", "eager; raises at beta > 0 on request", _eager,
        caps=Capabilities(label_smoothing=True),
    )
]
'''


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    """The plugin above, importable here and in every task and worker process."""
    folder = tmp_path_factory.mktemp("plugin")
    (folder / "cluster_plugin.py").write_text(textwrap.dedent(PLUGIN))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFSUITE_PLUGINS", "cluster_plugin")
        path = os.environ.get("PYTHONPATH", "")
        mp.setenv("PYTHONPATH", f"{folder}{os.pathsep}{path}" if path else str(folder))
        mp.syspath_prepend(str(folder))
        yield mp


def _sweep(out: Path, *extra: str) -> int:
    return main(["sweep", *TINY, *ARRAY, "--out", str(out), *extra])


def _submitted(out: Path) -> int:
    """Tasks submitit was handed so far (one pickle each)."""
    return len(list((out.parent / f"{out.name}.parts" / "logs").glob("*_submitted.pkl")))


@pytest.fixture(scope="module")
def stages(plugin, tmp_path_factory):
    """One array with a failing shard, its re-run once fixed, and a re-run with nothing
    left; what each printed and left behind."""
    out = tmp_path_factory.mktemp("array") / "sweep.json"
    found: dict[str, object] = {}

    def stage(name: str, *extra: str) -> None:
        printed = io.StringIO()  # the consoles write to sys.stdout/stderr as they are now
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            code = _sweep(out, *extra)
        found[name] = (code, printed.getvalue(), load_results(out), _submitted(out))

    plugin.setenv("CLUSTER_TEST_BREAK", "1")
    stage("failed")
    found["part0"] = (out.parent / "sweep.json.parts" / "shard-0-of-2.json").read_bytes()
    plugin.delenv("CLUSTER_TEST_BREAK")
    stage("fixed", "--resume")
    stage("again", "--resume")
    found["out"] = out
    return found


@pytest.mark.slow  # 7-30 s of ranks, workers or compiles here; `-m slow` runs it
def test_a_failing_shard_keeps_the_others_cells_and_exits_1(stages):
    code, printed, doc, submitted = stages["failed"]
    assert code == 1 and submitted == 2
    reason = [line for line in printed.splitlines() if "shard 1/2 failed" in line]
    assert len(reason) == 1, printed
    assert "RuntimeError: deliberate failure in the shard at beta > 0" in reason[0]
    assert "shard 0/2: done" in printed and "1 of 2 shard(s) failed (1/2)" in printed
    # Shard 0's cell (β=0, every phase) was merged into --out.
    assert {(r["beta"], r["status"]) for r in doc["rows"]} == {(0.0, "ok")}
    assert len(doc["rows"]) == PHASES
    assert doc["env"]["sweep"]["array"]["failed"].keys() == {"1"}


@pytest.mark.slow  # 7-30 s of ranks, workers or compiles here; `-m slow` runs it
def test_a_rerun_submits_only_the_missing_shard(stages):
    code, printed, doc, submitted = stages["fixed"]
    assert code == 0, printed
    assert "2 shards, 1 already measured; 1 shard(s) to submit" in printed
    assert submitted == 3  # one more task: shard 1 alone
    part0 = stages["out"].parent / "sweep.json.parts" / "shard-0-of-2.json"
    assert part0.read_bytes() == stages["part0"]  # shard 0 was not run again
    assert len(doc["rows"]) == 2 * PHASES
    assert {r["status"] for r in doc["rows"]} == {"ok"}
    first = {(r["method"], r["beta"], r["phase"]): r for r in stages["failed"][2]["rows"]}
    for row in doc["rows"]:  # the cells measured first are kept as they were
        if row["beta"] == 0:
            assert row == first[(row["method"], row["beta"], row["phase"])]
    assert [m["file"].rsplit("/", 1)[-1] for m in doc["env"]["merged_from"]] == [
        "shard-0-of-2.json",
        "shard-1-of-2.json",
    ]


def test_a_finished_sweep_resubmits_nothing_and_its_file_reports(stages, capsys):
    code, printed, doc, submitted = stages["again"]
    assert code == 0, printed
    assert "2 already measured; 0 shard(s) to submit" in printed
    assert submitted == 3
    assert doc["rows"] == stages["fixed"][2]["rows"]
    assert main(["report", str(stages["out"])]) == 0  # report reads the merged file
    table = capsys.readouterr().out
    assert "breaks-at-smoothing" in table and "n64-v256-d32" in table


def _one_error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, text
    return errors[0]


def test_slurm_without_sbatch_writes_nothing(plugin, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    error = refused(capsys, tmp_path, *TINY, "--executor", "slurm", "--out", str(tmp_path / "s"))
    assert "no sbatch on PATH" in error and "--executor local" in error  # no file, no folder


@pytest.mark.integration
def test_an_sbatch_refusing_the_partition_is_one_line(plugin, tmp_path, monkeypatch, capsys):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    # Keeps the script it was given, then refuses it as Slurm does an unknown partition.
    (bin_ / "sbatch").write_text(
        f'#!/bin/sh\ncp "$1" {tmp_path}/script.sh\n'
        'echo "sbatch: error: invalid partition specified: nope" >&2\nexit 1\n'
    )
    (bin_ / "srun").write_text("#!/bin/sh\nexit 1\n")
    for tool in bin_.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "s.json"
    argv = ["sweep", *TINY, "--executor", "slurm", "--shards", "2", "--out", str(out)]
    options = ["--partition", "nope", "--time-limit", "30", "--slurm-option", "account=proj"]
    assert main([*argv, *options]) == 2
    error = _one_error_line(capsys.readouterr().err)
    assert "invalid partition specified: nope" in error and "--partition nope" in error
    assert not out.exists()
    script = (tmp_path / "script.sh").read_text()
    for line in ("--partition=nope", "--time=30", "--account=proj", "--array=0-1%2"):
        assert f"#SBATCH {line}" in script
    assert "--gpus-per-task" not in script  # --device cpu asks for none
    assert "perfsuite.run.cluster" not in script  # the task is a pickle, not a command line


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--executor", "local", "--partition", "gpu"], "--partition: only for --executor slurm"),
        (["--executor", "local", "--slurm-option", "qos=high"], "--slurm-option: only for"),
        (["--shards", "4"], "--shards: need --executor"),
        (["--executor", "local", "--shard", "0/2"], "--shards N runs every shard"),
    ],
)
def test_options_that_do_not_apply_are_refused(plugin, tmp_path, capsys, extra, words):
    assert words in refused(capsys, tmp_path, *TINY, "--out", str(tmp_path / "s.json"), *extra)


def test_no_submitit_is_one_line(plugin, tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit: ImportError
    argv = [*TINY, "--executor", "local", "--out", str(tmp_path / "s.json")]
    assert "pip install submitit" in refused(capsys, tmp_path, *argv)


@pytest.mark.parametrize(
    ("made", "argv", "words"),
    [*RESUMES, (["--vocab", "512"], ["--resume"], "--resume {out}: a sweep of another grid")],
)
def test_an_array_resume_reads_back_only_its_own_sweep(plugin, tmp_path, capsys, made, argv, words):
    out = tmp_path / "s.json"
    if made is not None:
        started(out, [*TINY, *([] if made == "run" else made)], run=made == "run")
    said = refused(capsys, tmp_path, *TINY, *ARRAY, "--out", str(out), *argv)
    assert words.format(out=out) in said  # and no parts folder either
