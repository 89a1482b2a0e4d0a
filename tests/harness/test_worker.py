"""The one worker loop (``perfsuite.harness.worker.serve``), in process: its lines in the
order the harness reads them, each readable at once, a session's state handed to each
case, and a silent rank."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.harness.lifecycle import read_json_lines
from perfsuite.harness.worker import Served, emitter, main, serve


@dataclass
class ToySpec:
    out: str
    cases: list[dict[str, Any]]
    quiet: bool = False


def toy_case(spec: ToySpec, state: str, index: int, raw: dict, emit: Any, stage: Any) -> None:
    stage("measuring")
    emit({"row": raw["x"] * 2, "index": index, "state": state})


@contextmanager
def toy_session(spec: ToySpec, emit: Any) -> Iterator[tuple[str, Any]]:
    emit({"model": "toy"})  # before any case: the harness keeps it
    yield "ready", (lambda line: None) if spec.quiet else emit


WORKER = Served(ToySpec, toy_case, toy_session)


def test_serve_writes_each_case_after_its_start_line_and_a_silent_session_nothing(
    tmp_path: Path,
) -> None:
    out, spec = tmp_path / "out.jsonl", tmp_path / "spec.json"
    spec.write_text(json.dumps({"out": str(out), "cases": [{"x": 1}, {"x": 5}]}))
    assert serve(WORKER, str(spec)) == 0
    assert read_json_lines(out) == [
        {"model": "toy"},
        {"start": 0},
        {"stage": "measuring", "case": 0},
        {"row": 2, "index": 0, "state": "ready"},
        {"start": 1},
        {"stage": "measuring", "case": 1},
        {"row": 10, "index": 1, "state": "ready"},
    ]
    out.unlink()
    spec.write_text(json.dumps({"out": str(out), "cases": [{"x": 1}], "quiet": True}))
    assert main([__name__, str(spec)]) == 0  # as python_worker starts it: the WORKER
    assert read_json_lines(out) == [{"model": "toy"}]  # a rank but the first says nothing


def test_each_line_is_readable_as_soon_as_it_is_emitted(tmp_path):
    out = tmp_path / "rows.jsonl"
    out.write_text('{"start": 0}\n')  # a worker before a restart: appended to, never cut
    with emitter(out) as emit:
        emit({"stage": "gate", "case": 0})
        assert read_json_lines(out) == [{"start": 0}, {"stage": "gate", "case": 0}]
        emit(ToySpec("x", []))  # a dataclass (a Row) goes as its fields
        assert read_json_lines(out)[-1] == {"out": "x", "cases": [], "quiet": False}
