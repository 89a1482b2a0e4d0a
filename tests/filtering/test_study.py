"""The study's numbers on workloads where the answer is known, and its command."""

from __future__ import annotations

import json

import pytest
import torch

from perfsuite.cli import main
from perfsuite.filtering.stats import frequency_shares, softmax_stats
from perfsuite.filtering.study import run_study
from perfsuite.method import Case
from perfsuite.run.inputs import Inputs, make_inputs


def _row(result, *cell):
    """The row of (filter, order, threshold) ``cell``."""
    return next(r for r in result["rows"] if (r["filter"], r["order"], r["threshold"]) == cell)


def test_a_flat_softmax_keeps_every_tile_and_loses_nothing():
    case = Case(128, 2048, 32, "bf16")
    result = run_study(case, make_inputs(case, 0), thresholds=(2.0**-12,))
    assert result["summary"]["mean_entropy"] > 7.0
    for row in result["rows"]:
        assert row["tiles_kept"] == 1.0 and row["dropped_mass_mean"] == 0.0
        assert row["grad_e_within_gate"] and row["zero_dc_rows"] == 0.0


def _one_peak_rows(n=256, v=1024, peak=9.0):
    """C = I (D = V), so the logits are E: each row holds ``peak`` at one of the first 64
    ids and 0 elsewhere. Every tail entry has p = 1/(e^9 + 1023) ≈ 1.1e-4 < 2^-12, yet
    the tail holds 0.11 of each row's mass, far past the bf16 budget (2^-10)."""
    picks = torch.randint(0, 64, (n,), generator=torch.Generator().manual_seed(0))
    e = torch.zeros(n, v)
    e[torch.arange(n), picks] = peak
    c = torch.eye(v)
    return Inputs(e=e.bfloat16().requires_grad_(), c=c.bfloat16().requires_grad_(), targets=picks)


def test_a_peaked_softmax_drops_tiles_mass_and_dc_rows_and_says_so():
    case = Case(256, 1024, 1024, "bf16")
    result = run_study(case, _one_peak_rows(), thresholds=(2.0**-12,), orders=("natural",))
    tail = 1 / (torch.tensor(9.0).exp() + 1023)
    element = _row(result, "element", "natural", 2.0**-12)
    assert element["tiles_kept"] == 0.25  # of 4 vocab tiles of 256, only the first runs
    assert element["entries_kept"] == pytest.approx(0.25)
    assert element["dropped_mass_mean"] == pytest.approx(768 * float(tail), rel=1e-4)
    assert element["zero_dc_rows"] == pytest.approx(0.75)  # C rows 256.. get nothing
    cce = _row(result, "cce", "natural", 2.0**-12)  # 128-wide tiles: the first of 8 runs
    assert cce["tiles_kept"] == 0.125 and cce["zero_dc_rows"] == pytest.approx(0.875)
    none = result["rows"][0]
    assert none["filter"] == "none" and none["zero_dc_rows"] == 0.0
    assert none["grad_e_within_gate"] and none["grad_c_within_gate"]
    # A 128-wide tail tile holds 0.014 ≥ 2^-12: the mass budget keeps every pair.
    listed = _row(result, "tile-list", "natural", 2.0**-12)
    assert listed["tiles_kept"] == 1.0 and listed["dropped_mass_max"] == 0.0


def test_stats_count_entries_and_measure_the_frequency_direction():
    e = torch.tensor([[3.0, 0.0], [3.0, 4.0], [3.0, -4.0]])  # mean (3, 0)
    c = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    shares = frequency_shares(e, c)
    assert shares["share_e"] == pytest.approx((27 / 59) ** 0.5)
    assert shares["share_c"] == pytest.approx(0.5**0.5)
    e, targets = torch.tensor([[0.0, 0.0], [20.0, 0.0]]), torch.tensor([0, -100])
    stats = softmax_stats(e, torch.eye(2), targets, threshold=0.4)  # C = I: the logits are E
    assert stats["rows"] == 1 and stats["fraction_at_or_above_threshold"] == 1.0
    assert stats["mean_entropy"] == pytest.approx(0.6931, abs=1e-4)


@pytest.mark.integration
def test_the_filtering_command_writes_tables_plot_and_provenance(tmp_path, capsys):
    out = tmp_path / "syn"
    argv = "filtering --workload synthetic-axis --tokens 128 --vocab 1024 --hidden 32".split()
    argv += ["--thresholds", "2^-12,2^-8", "--orders", "natural,sorted", "--out", str(out)]
    assert main(argv) == 0
    doc = json.loads((tmp_path / "syn.json").read_text())
    assert doc["workload"]["geometry"] == "axis" and doc["env"]["git"]["sha"]
    assert len(doc["rows"]) == 1 + 2 * 3 * 2
    assert (tmp_path / "syn.png").stat().st_size > 10_000
    table = (tmp_path / "syn.md").read_text()
    assert "| tile-list | sorted | 2^-8 |" in table and "perfsuite filtering" in table
    assert main(argv) == 2 and "exists; pass --force" in capsys.readouterr().err
    random = ["--workload", "random", "--entropy", "2"]
    assert main([*argv[:-2], "--out", str(tmp_path / "r"), *random]) == 2
