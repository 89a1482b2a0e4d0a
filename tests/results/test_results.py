"""The results file: schema, atomic writes, one-call DataFrame, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfsuite.results.results import (
    ResultsError,
    Row,
    load_dataframe,
    load_results,
    new_document,
    write_results,
)


def _doc():
    rows = [
        Row("eager", 8, 16, 4, "fp32", 0.0, p, "ok", kind="loss", median_ms=1.0, p20_ms=0.9,
            p80_ms=1.1, samples_ms=[0.9, 1.0, 1.1], peak_bytes=10, peak_abs_bytes=20,
            max_abs_err=0.0)
        for p in ("fwd", "bwd", "fwd+bwd")
    ]  # fmt: skip
    return new_document({"device": {"name": "cpu"}}, rows)


def test_roundtrip_and_dataframe(tmp_path):
    path = write_results(tmp_path / "sub" / "r.json", _doc())
    doc = load_results(path)
    assert doc["schema_version"] == 2 and len(doc["rows"]) == 3
    assert json.loads(path.read_text())["rows"][0]["samples_ms"] == [0.9, 1.0, 1.1]  # plain
    df = load_dataframe(path)
    assert list(df["phase"]) == ["fwd", "bwd", "fwd+bwd"]
    columns = "method tokens vocab hidden dtype beta phase status reason median_ms p20_ms p80_ms"
    columns += " samples_ms peak_bytes peak_abs_bytes max_abs_err"
    assert set(columns.split()) <= set(df.columns)
    assert not list(tmp_path.joinpath("sub").glob("*.tmp"))  # no temp file left behind


def test_failed_write_keeps_the_old_file(tmp_path):
    path = write_results(tmp_path / "r.json", _doc())
    bad = _doc()
    bad["env"]["unserialisable"] = object()
    with pytest.raises(TypeError):
        write_results(path, bad)
    assert load_results(path)["rows"]  # the earlier file is intact
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_row_rejects_unknown_status_and_phase():
    with pytest.raises(ValueError, match="status"):
        Row("m", 1, 1, 1, "fp32", 0, "fwd", "fine", kind="loss")
    with pytest.raises(ValueError, match="phase"):
        Row("m", 1, 1, 1, "fp32", 0, "both", "ok", kind="loss")


def test_a_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'\xff\xfe{"schema_version": 1}')
    with pytest.raises(ResultsError, match="latin1.json: not a results file .*0xff"):
        load_results(path)


@pytest.mark.parametrize(
    ("cut", "message"),
    [
        (lambda text: text[: text.index('"method"') + 4], "(truncated?): Unterminated string"),
        (lambda text: text[: text.rindex("]")], "(truncated?)"),
        (lambda text: "", "the file is empty"),
        (lambda text: "{x" + text, "not valid JSON: Expecting property name"),
    ],
)
def test_json_errors_read_as_one_plain_line(tmp_path, capsys, cut, message):
    """Issue 20: "Unterminated string starting at at line 239" (doubled "at"), and the
    "(truncated?)" hint on an empty file but not on a truncated one."""
    from perfsuite.cli import main

    good = Path(__file__).resolve().parents[2] / "reports" / "cpu-smoke" / "results.json"
    bad = tmp_path / "bad.json"
    bad.write_text(cut(good.read_text()))
    assert main(["report", str(bad)]) == 2
    captured = capsys.readouterr()
    err = " ".join((captured.out + captured.err).split())
    assert message in err and " at at " not in err and "Traceback" not in err
