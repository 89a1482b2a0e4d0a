"""Progress lines of long runs (issue 30: a 420 s first cell printed nothing)."""

from __future__ import annotations

import pytest

from perfsuite.cli import main
from perfsuite.harness import progress
from perfsuite.harness.kind import Kind
from perfsuite.harness.progress import Tracker, duration
from perfsuite.plan.shapes import Shape

SHAPE = Shape("gemma2-2b*", 256, 256_000, 2304, dtype="bf16")


def _case(beta: float) -> dict:
    return dict(
        shape=SHAPE.name, tokens=SHAPE.tokens, vocab=SHAPE.vocab, hidden=SHAPE.hidden,
        dtype="bf16", beta=beta, softcap=None, device="cpu",
    )  # fmt: skip


# Every cell costs 1, interp's at a rate of its own; a predicted peak of 1.5 GiB.
KIND = Kind()
KIND.interpreted, KIND.peak = lambda m: m == "interp", lambda m, c: 3 << 29  # type: ignore


def test_a_long_cell_says_when_it_starts_and_what_it_does_every_heartbeat():
    now = [0.0]
    lines: list[str] = []
    cases = [_case(0.0), _case(0.1)]
    tracker = Tracker([("ours", c) for c in cases], lines.append, KIND, clock=lambda: now[0])
    tracker.worker_started("ours", cases)
    assert lines == ["ours: worker starting (2 cell(s) to measure)"]
    now[0] = 3.0
    tracker.poll("ours", [{"start": 0}])
    assert lines[-1].startswith("ours                   gemma2-2b* N=256 bf16 β=0: started")
    assert "(cell 1 of 2; peak ~1.5 GiB predicted)" in lines[-1]
    out = [{"start": 0}, {"stage": "fwd timing, 20 sample(s)", "case": 0}]
    now[0] = 20.0
    tracker.poll("ours", out)
    assert len(lines) == 2  # nothing new to say before the heartbeat is due
    now[0] = 3.0 + progress.HEARTBEAT_S
    tracker.poll("ours", out)
    assert lines[-1].endswith(": fwd timing, 20 sample(s)… (30 s in this cell)")
    now[0] = 60.0
    tracker.finished("ours", cases[0])
    tracker.poll("ours", [*out, {"start": 1}])
    # One of two equal cells took 60 s (imports included): about as much is left.
    assert "(cell 2 of 2; peak ~1.5 GiB predicted; ~1 min 00 s left)" in lines[-1]


def test_each_kind_of_cell_keeps_its_own_rate():
    """Interpreted cells are never timed at the native rate (issue 30: the smoke run's
    first estimate said 7 minutes of a 1-minute run)."""
    now = [0.0]
    units = [(method, _case(beta)) for method in ("native", "interp") for beta in (0.0, 0.1)]
    tracker = Tracker(units, lambda line: None, KIND, clock=lambda: now[0])
    for method in ("native", "interp"):
        tracker.worker_started(method, [_case(0.0), _case(0.1)])
    now[0] = 10.0
    tracker.finished("native", _case(0.0))  # 10 s a native cell
    # No interpreted cell has finished: its rate is unknown, the estimate says so.
    assert tracker.time_left(now[0]) == (10.0, "native")
    now[0] = 40.0
    tracker.finished("interp", _case(0.0))  # 40 s an interpreted one, side by side
    # 50 cell-seconds in 40 s; 10 + 40 cell-seconds to go: 40 s.
    assert tracker.time_left(now[0]) == (40.0, "")


def test_a_worker_slow_to_start_or_between_cells_is_heard_from():
    """A heartbeat after a cell's rows landed no longer names that cell."""
    now = [0.0]
    lines: list[str] = []
    tracker = Tracker([], lines.append, KIND, clock=lambda: now[0])
    tracker.worker_started("ours", [_case(0.0)])
    now[0] = 45.0
    tracker.poll("ours", [])
    assert lines[-1] == "ours: worker starting… (45 s)"
    out = [{"start": 0}, {"stage": "fwd+bwd timing, 20 sample(s)", "case": 0}]
    tracker.poll("ours", out)
    now[0] = 50.0
    tracker.finished("ours", _case(0.0))
    now[0] = 50.0 + progress.HEARTBEAT_S
    tracker.poll("ours", out)
    assert lines[-1] == "ours: worker between cells or ending… (30 s)"


def test_durations_read_as_minutes_and_hours():
    assert duration(59.6) == "1 min 00 s" and duration(3725) == "1 h 02 min"


@pytest.mark.integration
def test_run_prints_a_line_while_a_slow_cell_runs(fake_plugins, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.3)
    monkeypatch.setenv("COLUMNS", "200")
    argv = [
        "run", "--shape", "smoke", "--tokens", "32", "--vocab", "300", "--hidden", "16",
        "--methods", "fake-slow", "--beta", "0", "--phases", "fwd", "--samples", "1",
        "--warmup", "0", "--device", "cpu", "--out", str(tmp_path / "r.json"),
    ]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "fake-slow: worker starting (1 cell(s) to measure)" in text
    assert "smoke* N=32 fp32 β=0: started (cell 1 of 1; peak ~" in text
    assert "in this cell)" in text  # a heartbeat while the 0.4 s calls ran
