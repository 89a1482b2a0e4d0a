"""The worker's side of the protocol: each line written whole, readable at once."""

from __future__ import annotations

from dataclasses import dataclass

from perfsuite.harness.deaths import read_json_lines
from perfsuite.harness.protocol import emitter


@dataclass
class Spec:
    out: str
    cases: list


def test_each_line_is_readable_as_soon_as_it_is_emitted(tmp_path):
    out = tmp_path / "rows.jsonl"
    out.write_text('{"start": 0}\n')  # a worker before a restart: appended to, never cut
    with emitter(out) as emit:
        emit({"stage": "gate", "case": 0})
        assert read_json_lines(out) == [{"start": 0}, {"stage": "gate", "case": 0}]
        emit(Spec("x", []))  # a dataclass (a Row) goes as its fields
        assert read_json_lines(out)[-1] == {"out": "x", "cases": []}
