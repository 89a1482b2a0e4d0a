"""The TP size in a results file: part of a cell for merge, absent (one device) in every
file written before `run --tp`."""

from __future__ import annotations

import copy
import json

import pytest
from fake_results import paper_document, tp_document

from perfsuite.results.cells import cell_key
from perfsuite.results.merge import MergeError, merge_documents
from perfsuite.results.results import load_results


def test_a_file_without_tp_loads_as_one_device(tmp_path):
    doc = paper_document()
    for row in doc["rows"]:
        del row["tp"], row["collectives"], row["collective_bytes"], row["collective_ms"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    rows = load_results(path)["rows"]
    assert all(cell_key(r)[-2] is None for r in rows)  # (..., tp, timer)
    assert cell_key(rows[0]) == cell_key({**rows[0], "tp": None})


def test_merge_keeps_every_tp_size_and_names_it_in_a_duplicate():
    one, tp = paper_document(), tp_document(sizes=(1, 2))
    merged = merge_documents([("one.json", one), ("tp.json", tp)])
    assert len(merged["rows"]) == len(one["rows"]) + len(tp["rows"])
    # The plan's order: method, then TP size (one device first).
    ours = [r.get("tp") for r in merged["rows"] if r["method"] == "ours"]
    assert ours == sorted(ours, key=lambda k: k or 0) and ours[-2:] == [1, 2]
    again = copy.deepcopy(tp)
    again["rows"] = [r for r in again["rows"] if (r["method"], r["tp"]) == ("ours", 2)]
    with pytest.raises(MergeError, match=r"cell ours TP=2 N=8192 .* fwd\+bwd is in both"):
        merge_documents([("a.json", tp), ("b.json", again)])
    again["rows"][0]["tp"] = 4  # another size: another cell
    assert len(merge_documents([("a.json", tp), ("b.json", again)])["rows"]) == 5


def test_canonical_order_takes_a_training_steps_phases():
    """`merge` of a `perfsuite step` file sorted its rows with PHASES.index and failed."""
    from perfsuite.results.cells import canonical_order

    base = {"method": "ours", "tokens": 16, "vocab": 64, "hidden": 8, "dtype": "fp32"}
    rows = [{**base, "beta": 0.0, "phase": p} for p in ("step", "opt", "bwd", "fwd")]
    ordered = canonical_order(rows, {"methods": ["ours"], "dtypes": ["fp32"], "betas": [0.0]})
    assert [r["phase"] for r in ordered] == ["fwd", "bwd", "opt", "step"]
