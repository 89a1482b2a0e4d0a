"""Interpreted workers beside native ones: stopped while a native clock runs, and the
interpreted protocol (one sample per phase, memory and the gate kept; its rows beside
native ones: tests/run/test_runner.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfsuite.harness import schedule as pause
from perfsuite.plan.plan import build_plan
from perfsuite.plan.shapes import Shape

TINY = Shape("tiny", 32, 300, 24, dtype="fp32")


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _stopped_within_5_s(pid: int, stopped: bool = True) -> bool:
    """A signal takes effect when its process next runs: on a busy machine, not at once."""
    deadline = time.monotonic() + 5
    while (_state(pid) == "T") != stopped and time.monotonic() < deadline:
        time.sleep(0.01)
    return (_state(pid) == "T") == stopped


@pytest.fixture
def spinner(tmp_path, monkeypatch):
    """A busy process listed on a pause board, as an interpreted worker is."""
    board = pause.PauseBoard(str(tmp_path))
    code = "import time\nwhile True: time.sleep(0.001)"
    proc = board.start(
        lambda env: subprocess.Popen([sys.executable, "-c", code], start_new_session=True), True
    )
    monkeypatch.setenv(pause.PAUSE_VAR, str(board.path))
    yield board, proc
    proc.kill()
    proc.wait()


@pytest.mark.integration
def test_a_native_clock_stops_the_listed_workers_and_continues_them(spinner):
    board, proc = spinner
    # Listed, it also gives way to native workers' untimed work.
    assert os.getpriority(os.PRIO_PROCESS, proc.pid) == pause.BESIDE_NICE
    with pause.paused():
        assert _state(proc.pid) == "T"
    assert _stopped_within_5_s(proc.pid, stopped=False)
    board.ended(proc.pid, interpreted=True)
    with pause.paused():  # no longer listed: left running
        assert _state(proc.pid) != "T"


@pytest.mark.integration
def test_workers_left_stopped_by_a_dead_native_worker_are_continued(spinner):
    board, proc = spinner
    os.killpg(proc.pid, signal.SIGSTOP)  # as if a native worker died inside ``paused``
    assert _stopped_within_5_s(proc.pid)
    board.ended(0, interpreted=False)  # a native worker ended
    assert _stopped_within_5_s(proc.pid, stopped=False)


def test_paused_without_a_board_signals_no_process(monkeypatch):
    monkeypatch.delenv(pause.PAUSE_VAR, raising=False)
    sent: list = []
    monkeypatch.setattr(pause, "_signal", lambda *args: sent.append(args) or [])
    with pause.paused():
        pass
    assert sent == []


@pytest.mark.integration
def test_ctrl_c_while_interpreted_workers_run_on_stops_them(fake_plugins, monkeypatch):
    """The native side finished; Ctrl-C while the interpreted side's worker still runs
    (here a worker sleeping a minute) kills it, and the run ends at once."""
    import threading

    from perfsuite.harness import kind as harness
    from perfsuite.harness.schedule import CANCEL
    from perfsuite.run import runner

    plan = build_plan(shapes=[TINY], methods="eager,ours-tiles", device="cpu", jobs=2)
    sleeps = build_plan(shapes=[TINY], methods="fake-sleeps", device="cpu", samples=1, warmup=0)
    run_cases = harness.run_cases

    def work(kind, method: str, *args) -> list:
        if method == "ours-tiles":  # stands in for an interpreted method's long worker
            run_cases(runner.LossKind(sleeps), "fake-sleeps", sleeps.cases())
        return []

    # A real SIGINT, as Ctrl-C sends, under Python's own handler: a suite started in the
    # background (`pytest &` in a script) inherits SIGINT ignored, and this test then
    # waited out the worker's minutes of sleep.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(3, os.kill, (os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        monkeypatch.setattr(harness, "run_cases", work)
        with pytest.raises(KeyboardInterrupt):
            harness.run_kind(runner.LossKind(plan), {m: plan.cases() for m in plan.methods})
        assert time.monotonic() - start < 15  # not the worker's 60 s
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not CANCEL.is_set() and pause.BOARD is None


def test_an_interpreted_case_calls_the_method_three_times():
    """The gate, then per phase its memory pass: fwd's loss is bwd's set-up, and no phase
    has a timing pass (each call under the interpreter costs about a second)."""
    from perfsuite.baselines.torch_methods import eager_loss
    from perfsuite.method import Capabilities, SimpleMethod
    from perfsuite.run.worker import WorkerSpec, run_case

    calls = [0]

    def build(case, c):
        def loss_fn(e, c, t):
            calls[0] += 1
            return eager_loss(e, c, t, case.beta)

        return loss_fn

    raw = dict(
        shape="tiny", tokens=TINY.tokens, vocab=TINY.vocab, hidden=TINY.hidden, dtype="fp32",
        beta=0.0, softcap=None, device="cpu",
    )  # fmt: skip
    # Native: the gate twice (determinism), then per phase 1 + 4 samples + 1 warm-up calls.
    for triton, want in ((True, 3), (False, 2 + 3 * (1 + 4 + 1))):
        method = SimpleMethod("counted", "eager, counted", build, Capabilities(triton=triton))
        spec = WorkerSpec("counted", [raw], out="", samples=4, warmup=1)
        rows = []
        calls[0] = 0
        run_case(spec, method, 0, raw, rows.append)
        assert [r.status for r in rows] == ["ok"] * 3
        assert calls[0] == want, (triton, calls[0])
        assert all(len(r.samples_ms) == (1 if triton else 4) for r in rows)
        assert all(r.peak_bytes is not None for r in rows)
