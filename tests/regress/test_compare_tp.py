"""The TP size is part of a cell for `compare` and `baseline`: a TP=2 cell never matches
a TP=1 one nor a one-device one; files from before `tp` compare as they always did."""

from __future__ import annotations

import copy
import json

import pytest

from perfsuite.cli import main as perfsuite_main
from perfsuite.regress.compare import render_markdown
from perfsuite.regress.verdicts import CompareError, compare_documents
from perfsuite.results.results import write_results
from regress.test_compare import ENV, make_doc, one_error_line, slower


def at_tp(doc: dict, tp: int | None) -> dict:
    doc = copy.deepcopy(doc)
    for row in doc["rows"]:
        row["tp"] = tp
        row["kind"] = "loss" if tp is None else "tp"  # a TP size makes it a multi-rank cell
    return doc


def cli(*argv) -> int:
    return perfsuite_main([*map(str, argv)])


def test_tp1_against_tp2_matches_nothing_and_names_both_sizes(tmp_path, capsys):
    base = write_results(tmp_path / "tp1.json", at_tp(make_doc(), 1))
    cur = write_results(tmp_path / "tp2.json", at_tp(make_doc(seed=1), 2))
    assert cli("compare", base, cur) == 2
    err = one_error_line(capsys)
    assert "nothing to compare: no cell is in both" in err and "never compared" in err
    assert f"TP size TP=1 in {base} but TP=2 in {cur}" in err
    assert "method" not in err.split("(")[1].split("TP size")[0]  # the one difference


def test_one_device_against_tp1_matches_nothing():
    with pytest.raises(CompareError, match="TP size one device in baseline but TP=1 in current"):
        compare_documents(make_doc(), at_tp(make_doc(seed=1), 1))


def test_cells_pair_up_per_tp_size_only(tmp_path, capsys):
    """One file may hold every size: only equal sizes are compared, a table each."""
    base = make_doc()
    base["rows"] += at_tp(make_doc(), 2)["rows"] + at_tp(make_doc(), 4)["rows"]
    cur = at_tp(slower(make_doc(seed=1), "ours", 1.5), 2)
    cur["rows"] += make_doc(seed=2)["rows"]
    result = compare_documents(base, cur)
    assert result.count("missing") == 6  # TP=4
    assert result.count("same") == 6 + 3  # one device, and eager at TP=2
    regressed = [c.row for c in result.cells if c.verdict == "regression"]
    assert {(r["method"], r["tp"]) for r in regressed} == {("ours", 2)} and len(regressed) == 3
    md = render_markdown(result)
    assert "| ours TP=2 | gemma2-2b |" in md and "| ours TP=4 |" in md
    assert cli("compare", write_results(tmp_path / "b.json", base),
               write_results(tmp_path / "c.json", cur)) == 1  # fmt: skip
    titles = [ln.strip() for ln in capsys.readouterr().out.splitlines() if "β=" in ln]
    assert titles == ["gemma2-2b bf16 β=0.1"] + [
        f"gemma2-2b bf16 β=0.1, TP={k} (across {k} ranks)" for k in (2, 4)
    ]


def test_files_without_a_tp_key_compare_as_before(tmp_path, capsys):
    docs = {"b.json": make_doc(), "c.json": slower(make_doc(seed=1), "ours", 1.10)}
    for name, doc in docs.items():
        for row in doc["rows"]:
            for key in ("tp", "collectives", "collective_bytes", "collective_ms"):
                del row[key]
        (tmp_path / name).write_text(json.dumps(doc))
    assert cli("compare", tmp_path / "b.json", tmp_path / "c.json") == 1
    out = capsys.readouterr().out
    assert "3 regression, 3 same" in out and "TP" not in out
    explicit = compare_documents(at_tp(docs["b.json"], None), at_tp(docs["c.json"], None))
    assert (explicit.count("regression"), explicit.count("same")) == (3, 3)


def test_baseline_update_keeps_each_tp_size_in_its_own_file(tmp_path, capsys):
    root = tmp_path / "baselines"
    one = write_results(tmp_path / "one.json", make_doc())
    tp = make_doc()
    tp["rows"] = at_tp(make_doc(), 2)["rows"] + at_tp(make_doc(), 4)["rows"]
    multi = write_results(tmp_path / "tp.json", tp)
    assert cli("baseline", "update", one, "--root", root) == 0
    assert cli("baseline", "update", multi, "--root", root) == 0
    folder = root / "nvidia-h100-80gb-hbm3"
    assert sorted(p.name for p in folder.iterdir()) == [
        "gemma2-2b-tp2.json",
        "gemma2-2b-tp4.json",
        "gemma2-2b.json",  # the one-device baseline, not replaced by the TP run
    ]
    capsys.readouterr()
    cur = write_results(tmp_path / "cur.json", at_tp(slower(make_doc(seed=1), "ours", 1.5), 2))
    assert cli("compare", root, cur) == 1
    out = capsys.readouterr().out
    assert "gemma2-2b-tp2.json" in out and "3 regression, 3 same" in out
    assert json.loads((folder / "gemma2-2b.json").read_text())["rows"][0].get("tp") is None
    assert ENV["device"]["name"] == "NVIDIA H100 80GB HBM3"
