"""perfsuite merge: shards joined, environments checked, duplicates refused."""

from __future__ import annotations

import copy
import json

import pytest
from fake_results import H100_ENV, grid_document

from perfsuite.results.cells import cell_key
from perfsuite.results.merge import MergeError, merge_documents
from perfsuite.results.results import load_results


def _split(doc):
    """Two shards of a document, rows interleaved like --shard i/2."""
    a, b = copy.deepcopy(doc), copy.deepcopy(doc)
    a["rows"], b["rows"] = doc["rows"][0::2], doc["rows"][1::2]
    for i, part in enumerate((a, b)):
        part["env"]["sweep"] = {"shard": f"{i}/2"}
    return a, b


def test_shards_merge_back_in_canonical_order():
    whole = grid_document(H100_ENV)
    a, b = _split(whole)
    merged = merge_documents([("b.json", b), ("a.json", a)])
    assert len(merged["rows"]) == len(whole["rows"])
    assert {cell_key(r) for r in merged["rows"]} == {cell_key(r) for r in whole["rows"]}
    # The same order whichever way round the shards are given.
    again = merge_documents([("a.json", a), ("b.json", b)])
    assert [cell_key(r) for r in merged["rows"]] == [cell_key(r) for r in again["rows"]]
    assert [m["file"] for m in merged["env"]["merged_from"]] == ["b.json", "a.json"]
    assert merged["env"]["sweep"]["shard"] is None


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("versions", "torch"), "2.12.0", "torch version: '2.13.0'"),
        (("git", "sha"), "def", "git.sha"),
        (("plan", "samples"), 5, "plan.samples"),
    ],
)
def test_environments_must_agree(path, value, named):
    a, b = _split(grid_document(H100_ENV))
    b["env"][path[0]][path[1]] = value
    with pytest.raises(MergeError, match="environments disagree") as err:
        merge_documents([("a.json", a), ("b.json", b)])
    assert named.split(":")[0] in str(err.value)
    merged = merge_documents([("a.json", a), ("b.json", b)], allow_mismatch=True)
    assert len(merged["env"]["merge_mismatches"]) == 1


def test_different_devices_are_never_merged():
    """The merged env names one device: a CPU cell must not be labelled an H100's."""
    a, b = _split(grid_document(H100_ENV))
    b["env"]["device"]["name"] = "Some CPU"
    for flag in (False, True):
        with pytest.raises(MergeError, match="different devices"):
            merge_documents([("a.json", a), ("b.json", b)], allow_mismatch=flag)


def test_duplicate_cells_are_refused_or_chosen_and_skipped_ones_replaced():
    doc = grid_document(H100_ENV)
    other = copy.deepcopy(doc)
    for r in other["rows"]:
        r["reason"] = "second"
    with pytest.raises(MergeError, match="is in both a.json and b.json"):
        merge_documents([("a.json", doc), ("b.json", other)])
    first = merge_documents([("a.json", doc), ("b.json", other)], duplicates="first")
    last = merge_documents([("a.json", doc), ("b.json", other)], duplicates="last")
    assert {r["reason"] for r in last["rows"]} == {"second"}
    assert "second" not in {r["reason"] for r in first["rows"]}
    skipped = copy.deepcopy(doc)  # a measured cell replaces a skipped one, either way round
    for r in skipped["rows"]:
        r["status"], r["reason"] = "skipped", "predicted not to fit"
    for order in ([("s", skipped), ("m", doc)], [("m", doc), ("s", skipped)]):
        merged = merge_documents(order)
        assert "skipped" not in {r["status"] for r in merged["rows"]}


def test_command(tmp_path, capsys):
    from perfsuite.cli import main

    a, b = _split(grid_document(H100_ENV))
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, doc in zip(paths, (a, b), strict=True):
        path.write_text(json.dumps(doc))
    out = tmp_path / "all.json"
    assert main(["merge", *map(str, paths), "-o", str(out)]) == 0
    assert len(load_results(out)["rows"]) == len(a["rows"]) + len(b["rows"])
    assert main(["merge", str(paths[0]), str(paths[0]), "-o", str(out)]) == 2
    assert main(["merge", str(tmp_path / "nope.json"), "-o", str(out)]) == 2
    capsys.readouterr()
    before = paths[0].read_bytes()
    assert main(["merge", *map(str, paths), "-o", str(paths[0])]) == 2  # never over an input
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: -o {paths[0]}: is an input; give another file name"]
    assert paths[0].read_bytes() == before
