"""The train kind as the harness sees it, in-process: a run is finished when its result
line is in, and a run lost with its worker keeps the steps it had finished (deaths and
timeouts themselves are tests/harness/test_lifecycle.py's)."""

from __future__ import annotations

from perfsuite.converge.presets import PRESETS
from perfsuite.converge.runner import Cell, TrainKind
from perfsuite.plan.registry import all_methods


def _kind() -> TrainKind:
    preset = PRESETS["smoke"]
    return TrainKind(all_methods(), preset, "bigram", "cpu", 1, 60.0)


def test_a_lost_run_keeps_its_steps_and_the_reason():
    kind = _kind()
    cases = [kind.case(Cell("eager", 0.0, "fp32")), kind.case(Cell("eager", 0.1, "fp32"))]
    result = {"method": "eager", "beta": 0.0, "dtype": "fp32", "status": "ok", "steps": []}
    lines = [
        {"model": {"class": "Llama"}},
        {"start": 0},
        {"run": 0, "result": result, "params": None},
        {"start": 1},
        {"run": 1, "step": {"step": 0, "loss": 7.0}},
        {"run": 1, "step": {"step": 1, "loss": 6.5}},
    ]
    assert kind.finished(lines, cases) == [[{**result, "params": None}]]
    reason = "worker died of SIGSEGV"
    (lost,) = kind.lost("eager", cases[1], 1, lines, "error", reason)
    assert (lost["beta"], lost["status"], lost["reason"]) == (0.1, "error", reason)
    assert [s["loss"] for s in lost["steps"]] == [7.0, 6.5]
    models = []
    kind.on_model = models.append
    kind.heard("eager", lines)
    assert models == [{"class": "Llama"}]


def test_runs_decided_without_a_worker_and_the_timeout_is_per_run():
    """A method without label smoothing: unsupported at β 0.1, never trained at β 0
    instead; its β 0 run is a worker's."""
    kind = _kind()
    smooth, plain = (kind.case(Cell("torchtune-chunked", b, "fp32")) for b in (0.1, 0.0))
    (row,) = kind.decided("torchtune-chunked", smooth)
    assert row["status"] == "unsupported" and row["steps"] == []
    assert row["beta"] == 0.1 and "no label smoothing" in row["reason"]
    assert kind.decided("torchtune-chunked", plain) is None
    assert kind.decided("eager", kind.case(Cell("eager", 0.1, "fp32"))) is None
    assert kind.per_case and kind.interpreted("liger") and not kind.interpreted("eager")
