"""Every results file committed under reports/ still loads (version 1, every kind) and
reads the same after a version 2 round trip; the other JSON there (converge, filtering,
sensitivity reports, GPU-plan manifests) is refused as not a results file, in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfsuite.cli import main
from perfsuite.results.results import (
    ResultsError,
    load_results,
    new_document,
    write_results,
)
from perfsuite.results.schema import v1_kind

REPORTS = Path(__file__).resolve().parents[2] / "reports"
# reports/runs/ is where a user's own runs go (git-ignored): never read by a test.
FILES = sorted(p for p in REPORTS.rglob("*.json") if p.relative_to(REPORTS).parts[0] != "runs")
RESULTS = [p for p in FILES if "schema_version" in json.loads(p.read_text())]


def raw_kinds(path: Path) -> list[str]:
    """Each row's kind as the file holds it: said (version 2), or by its fields (version 1)."""
    return [r.get("kind") or v1_kind(r) for r in json.loads(path.read_text())["rows"]]


def other_document(document: dict) -> str | None:
    """What a committed JSON that is not a results file is, by its own fields."""
    if isinstance(document.get("schema"), str):
        return document["schema"]  # perfsuite.converge/1, perfsuite-filtering/1
    if set(document) == {"report", "data"}:
        return "sensitivity report"
    if {"call", "commit", "steps"} <= set(document):
        return "GPU plan manifest"
    return None


def test_the_walk_sees_every_kind_of_committed_file():
    kinds = {k for p in RESULTS for k in raw_kinds(p)}
    assert kinds == {"loss", "tp", "step"}
    assert len(RESULTS) >= 20 and len(FILES) > len(RESULTS)


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: str(p.relative_to(REPORTS)))
def test_a_committed_results_file_loads_and_survives_version_2(tmp_path, path):
    document = load_results(path)
    assert document["rows"] and [r["kind"] for r in document["rows"]] == raw_kinds(path)
    again = write_results(tmp_path / "v2.json", new_document(document["env"], document["rows"]))
    raw = json.loads(again.read_text())
    assert raw["schema_version"] == 2 and all("kind" in r for r in raw["rows"])
    reread = load_results(again)
    assert reread["env"] == document["env"]
    for before, after in zip(document["rows"], reread["rows"], strict=True):
        # Version 2 drops another kind's empty fields (a loss row's tp: None) only.
        assert {k: v for k, v in before.items() if v is not None} == {
            k: v for k, v in after.items() if v is not None
        }


def smallest_of_each_kind() -> list[Path]:
    """One file per kind of row, the one with the fewest rows (compare's statistics cost
    ~0.2 s a cell: the walk above already reads every file)."""
    best: dict[str, tuple[int, Path]] = {}
    for path in RESULTS:
        rows = raw_kinds(path)
        for kind in set(rows):
            best[kind] = min(best.get(kind, (len(rows), path)), (len(rows), path))
    return sorted(path for _, path in best.values())


@pytest.mark.parametrize("path", smallest_of_each_kind(), ids=lambda p: str(p.relative_to(REPORTS)))
def test_a_committed_results_file_is_compared_with_itself(path, capsys):
    assert main(["compare", str(path), str(path), "--accept-busy"]) in (0, 1)
    assert "error" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "path", [p for p in FILES if p not in RESULTS], ids=lambda p: str(p.relative_to(REPORTS))
)
def test_other_committed_json_is_not_read_as_results(path):
    assert other_document(json.loads(path.read_text())) is not None
    with pytest.raises(ResultsError) as caught:
        load_results(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
