"""The results envelope, version 2: rows by kind with their metrics nested, one pydantic
schema checking every file read (versions 1 and 2), one error line naming the file, the
row and the field; and the readers' kind checks."""

from __future__ import annotations

import json
import re
from dataclasses import fields

import pytest
from fake_results import H100_ENV, MALFORMED, malformed_text, paper_document, tp_document

from perfsuite.results import schema
from perfsuite.results.kinds import METRICS, OWN_FIELDS
from perfsuite.results.results import (
    ResultsError,
    Row,
    load_results,
    new_document,
    require_kind,
    write_results,
)

STEP = "step(layers=1,seq=16,batch=1)"


def step_row(phase: str = "opt", kind: str = "step", **extra) -> Row:
    return Row(kind=kind, method="ours", tokens=16, vocab=64, hidden=8, dtype="fp32", beta=0.0,
               phase=phase, status="ok", workload=STEP, median_ms=2.0, samples_ms=[2.0],
               **extra)  # fmt: skip


def train_row(**extra) -> dict:
    return {"kind": "train", "method": "ours", "tokens": 128, "vocab": 512, "hidden": 64,
            "dtype": "fp32", "beta": 0.0, "phase": "train", "status": "ok",
            "steps": [{"loss": 6.2}], "heldout": {"loss": 5.9}, "parity": None,
            "wall_s": 7.3, **extra}  # fmt: skip


def written(tmp_path, document, name="r.json"):
    path = write_results(tmp_path / name, document)
    return path, json.loads(path.read_text())


def test_every_row_field_is_in_the_schema():
    """A field added to ``Row`` but not to the schema would make every file refused."""
    known = set(schema._Cell.model_fields) | {"kind", "phase"}
    known |= {f for names in (*METRICS.values(), *OWN_FIELDS.values()) for f in names}
    assert {f.name for f in fields(Row)} <= known


@pytest.mark.parametrize(
    ("rows", "kind", "nested"),
    [
        (paper_document()["rows"][:3], "loss", None),
        (tp_document(sizes=(2,))["rows"], "tp", {"collectives": 4}),
        ([step_row(loss_ms=0.5)], "step", {"loss_ms": 0.5}),
        ([train_row()], "train", {"wall_s": 7.3, "parity": None}),
    ],
)
def test_each_kind_is_written_nested_and_read_flat(tmp_path, rows, kind, nested):
    path, raw = written(tmp_path, new_document(H100_ENV, rows))
    assert raw["schema_version"] == 2
    first = raw["rows"][0]
    assert first["kind"] == kind and list(first)[0] == "kind"
    if nested is None:
        assert "metrics" not in first and "tp" not in first and "loss_ms" not in first
    else:
        assert nested.items() <= first["metrics"].items()
        assert not set(nested) & set(first)  # only under metrics
    assert ("tp" in first) == (kind == "tp")
    loaded = load_results(path)
    assert [r["kind"] for r in loaded["rows"]] == [kind] * len(rows)
    for key, value in (nested or {}).items():
        assert loaded["rows"][0][key] == value  # flat again, as readers index it


def test_a_row_is_made_with_its_kind_and_never_guessed_but_in_version_1():
    row = step_row()
    row.workload = "random"  # the kind that made it stands, whatever its fields say
    assert new_document({}, [row])["rows"][0]["kind"] == "step"
    with pytest.raises(TypeError, match="'kind'"):
        Row("ours", 16, 64, 8, "fp32", 0.0, "opt", "ok")
    with pytest.raises(ValueError, match="kind 'bogus'"):
        step_row(kind="bogus")
    for kindless in ({**vars(step_row()), "kind": None}, train_row(kind="")):
        with pytest.raises(ValueError, match="^row 0 .*has kind"):
            new_document({}, [kindless])
    tp = tp_document(sizes=(2,))["rows"][0]  # only version 1's reader reads the fields
    assert [schema.v1_kind(r) for r in (vars(row), tp, vars(step_row()))] == ["loss", "tp", "step"]


# Every defect in both versions, but the missing kind: a version 1 row has none to miss.
BOTH_VERSIONS = [
    pytest.param(version, mangle, message, id=f"v{version}-{name}")
    for version in (1, 2)
    for name, mangle, message in MALFORMED
    if version == 2 or not name.startswith("v2-")
]


@pytest.mark.parametrize(("version", "mangle", "message"), BOTH_VERSIONS)
def test_a_malformed_file_is_one_line_naming_file_row_and_field(tmp_path, version, mangle, message):
    path = tmp_path / "bad.json"
    path.write_text(malformed_text(mangle, version))
    with pytest.raises(ResultsError) as caught:
        load_results(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: {message}") and "\n" not in text


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (vars(step_row(phase="fwd")), None),
        ({**vars(step_row()), "phase": "fwd+bwd"}, "phase is 'fwd+bwd', not one of 'fwd', "),
        ({**vars(step_row()), "workload": "random", "kind": "step"}, "workload is 'random', "),
        ({**vars(step_row()), "loss_ms": -1.0}, "metrics.loss_ms is -1.0, not a finite"),
        ({**vars(step_row()), "collectives": 4}, "collectives is not a field of a step row"),
        (train_row(phase="fwd"), "phase is 'fwd', not one of 'train'"),
        (train_row(wall_s="7"), "metrics.wall_s is '7', not a finite number >= 0"),
        ({**tp_document()["rows"][0], "tp": 0}, "tp is 0, not a TP size (an integer >= 1)"),
        ({**tp_document()["rows"][0], "collective_bytes": 1.5},
         "metrics.collective_bytes is 1.5, not an integer"),
        ({**tp_document()["rows"][0], "collective_ms": -1.0}, "metrics.collective_ms is -1.0, "),
        ({**tp_document()["rows"][0], "collectives": "4"}, "metrics.collectives is '4', not a "),
        ({**paper_document()["rows"][0], "kind": "bogus"}, "kind is 'bogus', not one of loss, "),
    ],
)  # fmt: skip
def test_each_kind_has_its_own_fields_and_phases(tmp_path, row, message):
    # Written as it stands: ``new_document`` refuses a row of no kind before a reader could.
    path = write_results(tmp_path / "r.json", {"schema_version": 2, "env": H100_ENV, "rows": [row]})
    if message is None:
        assert load_results(path)["rows"][0]["kind"] == "step"
        return
    with pytest.raises(ResultsError, match="^" + re.escape(f"{path}: row 0: {message}")):
        load_results(path)


def test_flat_rows_on_disk_a_version_1_one_and_a_version_2_document_dumped_by_hand(tmp_path):
    """A version 1 row names its flat field; a document as it is in memory (flat rows with
    their kind) is read."""
    doc = {"schema_version": 1, "env": {}, "rows": [{**vars(step_row()), "loss_ms": "x"}]}
    doc["rows"][0].pop("kind")
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match=r"row 0: loss_ms is 'x', not a finite number"):
        load_results(path)
    path.write_text(json.dumps(tp_document()))
    assert {r["kind"] for r in load_results(path)["rows"]} == {"tp"}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"schema": "perfsuite.converge/1"}, "not a results file (a perfsuite.converge/1 "),
        ({"schema_version": True, "env": {}, "rows": []}, "schema_version True, this "),
        ({"schema_version": 2, "env": {"device": "cpu"}, "rows": []},
         "env.device is 'cpu', not an object"),
        ({"schema_version": 2, "env": {}, "rows": [5]}, "row 0 is 5, not an object"),
        ({"schema_version": 2, "env": {}, "rows": [], "extra": 1}, "extra is 1, not "),
        ({"schema_version": 1, "rows": []}, "missing or malformed 'env'"),
    ],
)  # fmt: skip
def test_the_envelope_is_checked_too(tmp_path, document, message):
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ResultsError, match="^" + re.escape(f"{path}: {message}")):
        load_results(path)


def test_require_kind_says_which_kind_in_one_line():
    step = new_document({}, [step_row()])
    with pytest.raises(ResultsError) as caught:
        require_kind(step, "s.json", {"loss", "tp"}, "report")
    assert str(caught.value) == "s.json holds step rows; report takes loss or tp rows"
    require_kind(paper_document(), "p.json", {"loss"}, "report")  # nothing to say
    require_kind(new_document({}, []), "e.json", {"loss"}, "report")  # no rows, no kind
