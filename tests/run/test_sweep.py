"""perfsuite sweep: a tiny CPU grid killed midway, resumed, sharded and merged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from plugins import use_plugins

from perfsuite.plan.plan import PlanError
from perfsuite.results.cells import cell_key
from perfsuite.results.merge import merge_documents
from perfsuite.results.results import load_results
from perfsuite.run import sweep
from perfsuite.run.runner import LossKind
from perfsuite.run.sweep import Sweep, grid_units, parse_shard
from run.sweeping import RESUMES, refused, started, sweep_cli

GRID = [
    "--tokens", "16", "--vocab", "200", "--hidden", "16", "--beta", "0,0.1",
    "--dtype", "fp32", "--methods", "eager,fake-missing-package", "--device", "cpu",
    "--samples", "2", "--warmup", "1",
]  # fmt: skip
# fake-missing-package's cells are decided by the parent: a shard's two cells start one
# worker, eager's (a worker a method).
CELLS = 1 * 1 * 1 * 2 * 2  # N x V x D x beta x methods
PHASES = 3


@pytest.fixture(scope="module")
def plugins():
    """The fake-method plugin, here and in every process the sweep starts."""
    with pytest.MonkeyPatch.context() as mp:
        use_plugins(mp, "plugins.fake_methods")
        yield


def _args(*extra: str):
    parser = __import__("argparse").ArgumentParser()
    sweep.add_arguments(parser)
    return parser.parse_args([*GRID, *extra])


def _rows_now(path: Path) -> list[dict]:
    try:
        return json.loads(path.read_text())["rows"]
    except (OSError, ValueError):
        return []


def _first_cell(proc: subprocess.Popen, out: Path) -> None:
    """Wait (60 s at most) until the sweep ``proc`` has written one cell's rows to ``out``."""
    deadline = time.monotonic() + 60
    while len(_rows_now(out)) < PHASES:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "no cell landed within 60 s"
        time.sleep(0.05)


# The code's identity, pinned in the killed sweep and in its resumes: edits landing in this
# checkout between them must not read as another environment (git.diff).
PINNED = {"sha": "pinned", "dirty": False}
PINNED_CLI = (
    "import sys; from perfsuite.results import provenance; provenance.git_state = lambda: "
    f"{PINNED}; from perfsuite.cli import main; sys.exit(main(sys.argv[1:]))"
)


@pytest.fixture(scope="module")
def killed_and_resumed(plugins, tmp_path_factory):
    """Start a sweep, SIGKILL its process group once the first cells land, resume it."""
    out = tmp_path_factory.mktemp("sweep") / "full.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", PINNED_CLI, "sweep", *GRID, "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its workers die with it, as under Ctrl-C or scancel
    )
    try:
        _first_cell(proc, out)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = load_results(out)
    assert 0 < len(before["rows"]) < CELLS * PHASES, "killed too late to test resuming"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("perfsuite.results.provenance.git_state", lambda: dict(PINNED))
        assert sweep.run(_args("--out", str(out), "--resume")) == 0
        yield before, load_results(out), out


def test_resume_finishes_without_redoing_cells(killed_and_resumed):
    before, after, _ = killed_and_resumed
    rows = after["rows"]
    assert len(rows) == CELLS * PHASES
    assert len({cell_key(r) for r in rows}) == len(rows)  # no cell twice
    # The cells measured before the kill are kept as they were, samples and all.
    kept = {cell_key(r): r for r in rows}
    for row in before["rows"]:
        assert kept[cell_key(row)] == row
    resumed = after["env"]["sweep"]["resumed"]
    assert len(resumed) == 1 and resumed[0]["kept_rows"] == len(before["rows"])
    assert after["env"]["sweep"]["units_kept"] == len(before["rows"]) // PHASES
    statuses = {(r["method"], r["beta"]): r["status"] for r in rows}
    assert statuses[("eager", 0.0)] == statuses[("eager", 0.1)] == "ok"
    assert {statuses["fake-missing-package", beta] for beta in (0.0, 0.1)} == {"unavailable"}
    assert {r["kind"] for r in rows} == {"loss"}
    assert all(r["entropy"] > 0 and r["workload"] == "random" for r in rows if r["status"] == "ok")


def test_resuming_a_finished_sweep_runs_nothing(killed_and_resumed, monkeypatch):
    _, after, out = killed_and_resumed
    copy = out.with_name("again.json")
    copy.write_text(out.read_text())
    monkeypatch.setattr("perfsuite.harness.kind.run_cases", lambda *a: pytest.fail("ran a cell"))
    assert sweep.run(_args("--out", str(copy), "--resume")) == 0
    again = load_results(copy)
    assert again["rows"] == after["rows"]


@pytest.mark.integration
def test_shards_merge_to_the_unsharded_table(killed_and_resumed, tmp_path, monkeypatch, capsys):
    _, full, _ = killed_and_resumed  # its git identity pinned: the shards merge
    capsys.readouterr()
    assert sweep.run(_args("--out", str(tmp_path / "s0.json"), "--shard", "0/2")) == 0
    captured = capsys.readouterr()  # not a terminal: a line per cell, no bar
    printed = captured.out + captured.err
    assert "━" not in printed and ": ok" in printed
    # Shard 1 through two worker slots at once (what --gpus does with CUDA_VISIBLE_DEVICES).
    plan, grid = sweep.plan_from_args(_args())
    slots = [{"PERFSUITE_SLOT": "0"}, {"PERFSUITE_SLOT": "1"}]
    Sweep(plan, tmp_path / "s1.json", shard=(1, 2), slots=slots, grid=grid).run()
    shards = [(str(p), load_results(p)) for p in (tmp_path / "s0.json", tmp_path / "s1.json")]
    assert all(0 < len(doc["rows"]) < CELLS * PHASES for _, doc in shards)
    merged = merge_documents(shards)

    def layout(doc):
        return [(cell_key(r), r["status"]) for r in doc["rows"]]

    assert layout(merged) == layout(full)


def test_cells_that_cannot_fit_are_skipped_not_attempted(plugins, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("perfsuite.harness.kind.run_cases", lambda *a: pytest.fail("attempted"))
    out = tmp_path / "skip.json"
    args = _args("--out", str(out), "--methods", "eager", "--memory-limit", "64K")
    assert sweep.run(args) == 1  # nothing measured: not a success
    assert "sweep.py:" not in capsys.readouterr().err  # progress lines: no source path
    rows = load_results(out)["rows"]
    assert len(rows) == CELLS // 2 * PHASES  # eager alone
    assert {(r["status"], r["kind"]) for r in rows} == {("skipped", "loss")}
    assert "predicted peak" in rows[0]["reason"] and "--attempt-all" in rows[0]["reason"]
    from rich.console import Console

    from perfsuite.render.table import print_tables

    print_tables(rows, Console(file=open(os.devnull, "w")))  # noqa: SIM115


def test_skip_prediction_follows_the_memory_model():
    from perfsuite.plan.memory_model import predicted_peak
    from perfsuite.plan.registry import all_methods

    big = ("--tokens", "8192", "--vocab", "256000", "--hidden", "2048", "--dtype", "bf16")
    plan, _ = sweep.plan_from_args(_args("--methods", "eager,ours,torch-compile", *big))
    known = all_methods()
    cases = {method: case for method, case in grid_units(plan) if case["beta"] == 0}
    gib = 2**30
    # Every worker runs the correctness gate (fp32 reference: 3 N V 4 bytes, ~23 GiB).
    need, what = predicted_peak(known["ours"].caps, 8192, 256000, 2048, "bf16")
    assert 3 * 8192 * 256000 * 4 < need < 40 * gib and "reference" in what

    def fate(method: str, capacity: int | None) -> list | None:
        kind = LossKind(plan)
        kind.capacity = capacity
        return kind.decided(method, cases[method])

    assert fate("ours", 40 * gib) is None
    skipped = fate("ours", 20 * gib)
    assert {r["status"] for r in skipped} == {"skipped"}
    assert "reference" in skipped[0]["reason"] and "--attempt-all" in skipped[0]["reason"]
    assert "reference" in fate("eager", 20 * gib)[0]["reason"]
    assert fate("eager", None) is None  # capacity unknown: attempt all
    # A method holding more logit copies than the gate is named for them.
    need, what = predicted_peak(known["eager"].caps, 8192, 256000, 2048, "bf16", softcap=True)
    assert "N x V logits" in what and need > 7 * 8192 * 256000 * 2


def test_shards_partition_the_grid(plugins):
    plan, _ = sweep.plan_from_args(_args())
    everything = [str(unit) for unit in grid_units(plan)]
    parts = [[str(unit) for unit in grid_units(plan, (i, 3))] for i in range(3)]
    assert sorted(sum(parts, [])) == sorted(everything) and len(set(everything)) == CELLS
    assert parse_shard("1/3") == (1, 3)
    for bad in ("3/3", "x", "1/0", "-1/2"):
        with pytest.raises(PlanError):
            parse_shard(bad)


def test_refuses_to_overwrite_or_resume_elsewhere(plugins, tmp_path):
    out = tmp_path / "r.json"
    # no cell measured (exit 1): the file exists all the same
    assert sweep.run(_args("--out", str(out), "--methods", "eager", "--memory-limit", "1K")) == 1
    assert sweep_cli(*GRID, "--out", str(out), "--methods", "eager") == 2  # exists, no --resume
    doc = json.loads(out.read_text())
    doc["env"]["device"]["name"] = "some other CPU"
    out.write_text(json.dumps(doc))
    assert sweep_cli(*GRID, "--out", str(out), "--resume", "--memory-limit", "1K") == 2
    assert sweep_cli(*GRID, "--resume") == 2  # --resume without --out
    assert sweep_cli(*GRID, "--gpus", "all") == 2  # --gpus on a CPU sweep


def _git(monkeypatch, dirty: bool, diff: str | None = None) -> None:
    state = {"sha": "abc", "dirty": dirty, **({"diff": diff} if dirty else {})}
    monkeypatch.setattr("perfsuite.results.provenance.git_state", lambda: dict(state))


def test_resume_refuses_other_uncommitted_code(plugins, tmp_path, monkeypatch):
    """The README says resume refuses a file from other code; a dirty tree was let through."""
    from perfsuite.plan.plan import build_plan
    from perfsuite.plan.shapes import Shape

    plan = build_plan(shapes=[Shape("t", 8, 16, 4, "fp32")], methods="eager", device="cpu")
    out = tmp_path / "s.json"
    _git(monkeypatch, dirty=True, diff="aaaa")
    first = Sweep(plan, out)
    first.checkpoint.save()
    first.checkpoint.writer.release()
    Sweep(plan, out, resume=True).checkpoint.writer.release()  # the same uncommitted changes: fine
    for dirty, diff in ((False, None), (True, "bbbb")):
        _git(monkeypatch, dirty=dirty, diff=diff)
        with pytest.raises(PlanError, match="git.dirty|git.diff"):
            Sweep(plan, out, resume=True)
        # --force takes the user's word (and the refused sweep left the file free)
        Sweep(plan, out, resume=True, force=True).checkpoint.writer.release()


@pytest.mark.integration
def test_a_killed_writer_leaves_no_lock_behind(tmp_path):
    """Two `sweep --resume` of one file used to run side by side and keep only the last
    writer's rows (a held file's refusal: tests/results/test_lock.py); a writer's lock
    dies with it."""
    from perfsuite.results.lock import WriterLock

    out = tmp_path / "s.json"
    script = f"from perfsuite.results.lock import WriterLock; WriterLock({str(out)!r})"
    died = subprocess.run([sys.executable, "-c", script + "; import os; os._exit(9)"])
    assert died.returncode == 9  # holding the lock
    WriterLock(out).release()


@pytest.mark.parametrize(
    ("made", "argv", "words"),
    [
        *RESUMES,
        (["--vocab", "200,400"], ["--resume"], "another grid (vocab 200,400 there, 200 here"),
        (["--tokens", "32"], ["--resume", "--attempt-all"], "tokens 32 there, 16 here"),
        (["--methods", "eager"], ["--resume"], "methods eager there, eager,fake-missing-package"),
        (["--beta", "0.1"], ["--resume"], "betas 0.1 there, 0.0,0.1 here"),
        (["--softcap", "30"], ["--resume"], "softcap 30.0 there, none here"),
        ([], ["--resume", "--redo", "error,ok"], "--redo error,ok: 'ok' is not a status"),
        (None, ["--redo", "error"], "--redo error retries cells of a sweep being resumed"),
    ],
)
def test_resume_reads_back_only_its_own_sweep(plugins, tmp_path, capsys, made, argv, words):
    """V=200,400 resumed as a 200,300 sweep used to measure into it and rewrite its plan
    (--attempt-all is not for grids)."""
    out = tmp_path / "s.json"
    if made is not None:
        started(out, [*GRID, *([] if made == "run" else made)], run=made == "run")
    assert words.format(out=out) in refused(capsys, tmp_path, *GRID, "--out", str(out), *argv)
