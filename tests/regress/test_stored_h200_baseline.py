"""The H200's stored baseline is the capped Gemma2-2B cell the nightly job compares with
(issue 45): `perfsuite compare reports/baselines RUN` picks it for an H200 run and judges
the run it was stored from `same`, cell by cell."""

from __future__ import annotations

import json
from pathlib import Path

from perfsuite.cli import main
from perfsuite.results.provenance import device_slug

ROOT = Path(__file__).resolve().parents[2]
STORED = ROOT / "reports" / "baselines" / "nvidia-h200" / "gemma2-2b.json"
MEASURED = ROOT / "reports" / "nvidia-h200" / "raw" / "1-cell-tests" / "gemma2-2b-fwdbwd.json"


def test_the_h200_baseline_is_the_capped_cell_it_was_stored_from():
    stored = json.loads(STORED.read_text())
    assert stored == json.loads(MEASURED.read_text())
    assert stored["env"]["device"]["name"] == "NVIDIA H200"
    assert device_slug(stored["env"]) == STORED.parent.name
    # The nightly job runs gemma2-* with --softcap (the model's 30): every row is capped.
    assert {(r["shape"], r["softcap"]) for r in stored["rows"]} == {("gemma2-2b", 30.0)}


def test_compare_picks_the_h200_baseline_and_finds_its_own_run_the_same(capsys):
    assert main(["compare", str(ROOT / "reports" / "baselines"), str(MEASURED)]) == 0
    out, err = capsys.readouterr()
    assert "error" not in err
    assert "nvidia-h200/gemma2-2b.json" in out.replace("\n", "")
    assert "OK: 10 same" in out
