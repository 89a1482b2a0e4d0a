"""The step kind as the harness sees it, in-process: which cases it decides without a
worker, when a case is finished in a worker's lines, and the rows of a lost case
(the lifecycle itself, timeouts and deaths, is tests/harness/test_lifecycle.py's)."""

from __future__ import annotations

from dataclasses import asdict

from perfsuite.harness.worker import case_rows
from perfsuite.results.results import STEP_PHASES
from perfsuite.step.plan import StepPlan
from perfsuite.step.presets import Size, get_preset
from perfsuite.step.runner import StepKind

SIZE = Size(layers=1, seq=16, batch=1)


def _kind(**plan) -> tuple[StepKind, list[dict]]:
    models = dict(presets=[get_preset("smoke")], sizes={"smoke": SIZE}, **plan)
    step = StepPlan(["eager", "cce"], [], ["fp32"], [0.0, 0.1], list(STEP_PHASES), "cpu", **models)
    return StepKind(step, {}), step.cases()


def test_a_case_lost_with_its_worker_keeps_its_rows_and_says_why_for_the_rest():
    kind, cases = _kind()
    done = [asdict(r) for r in case_rows("step", "eager", cases[0], STEP_PHASES, status="ok")]
    half = [asdict(r) for r in case_rows("step", "eager", cases[1], STEP_PHASES, status="ok")][:2]
    lines = [{"start": 0}, *done, {"start": 1}, {"model": "smoke", "info": {}}, *half]
    assert kind.finished(lines, cases) == [done]  # the second lacks opt and step
    reason = "worker timed out after 0.2 s"
    rows = kind.lost("eager", cases[1], 1, lines, "error", reason)
    assert [r["phase"] for r in rows] == list(STEP_PHASES)
    assert [r["status"] for r in rows] == ["ok", "ok", "error", "error"]
    assert all(r["reason"] == reason for r in rows[2:]) and rows[2]["beta"] == 0.1
    kind.heard("eager", lines)
    assert kind.models == {"smoke": {}}


def test_cases_decided_without_a_worker():
    kind, cases = _kind(capacity=1 << 20, capacity_source="--memory-limit")
    assert {r["status"] for r in kind.decided("cce", cases[0])} == {"unavailable"}
    over = kind.decided("eager", cases[0])  # predicted: skipped, as a sweep's cells
    assert {r["status"] for r in over} == {"skipped"} and "--memory-limit" in over[0]["reason"]
    assert _kind()[0].decided("eager", cases[0]) is None
    assert kind.interpreted("cce") and not kind.interpreted("eager")
