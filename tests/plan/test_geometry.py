"""The synthetic workload's prior direction: oblique, at a trained model's share of C."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from perfsuite.cli import main
from perfsuite.filtering.stats import frequency_shares
from perfsuite.plan.geometry import TRAINED_SHARE_C, embed
from perfsuite.plan.workloads import (
    WorkloadError,
    file_shape,
    parse_workload,
    read_dump,
    synthetic_inputs,
)

DUMP = Path(__file__).resolve().parents[2] / "reports" / "filtering" / "trained-v16k.safetensors"


def test_the_trained_geometry_keeps_the_softmax_and_targets_of_the_axis_one():
    e1, c1, t1, _ = synthetic_inputs(256, 2048, 64, entropy=2.0, seed=4, geometry="axis")
    e2, c2, t2, info = synthetic_inputs(256, 2048, 64, entropy=2.0, seed=4)
    assert info["geometry"] == "trained" and torch.equal(t1, t2)
    torch.testing.assert_close(
        torch.log_softmax(e2 @ c2.T, -1), torch.log_softmax(e1 @ c1.T, -1), atol=1e-4, rtol=0
    )
    # The old one put log π in hidden dimension 0, twelve-odd times the rest of a row.
    assert c1[:, 0].abs().mean() > 5 * c1[:, 1:].norm(dim=1).mean()
    assert c2.abs().mean(0).max() < 3 * c2.abs().mean()  # no dimension stands out now


def test_the_frequency_direction_is_the_planted_one_at_the_asked_share():
    e, c, _, info = synthetic_inputs(512, 4096, 64, entropy=2.0, seed=1)
    shares = frequency_shares(e, c)
    assert shares["share_c"] == pytest.approx(TRAINED_SHARE_C, abs=1e-4)
    assert shares["share_e"] == pytest.approx(info["share_e"], abs=1e-4)
    u = e.mean(0) / e.mean(0).norm()  # the frequency direction û
    assert u.abs().max() < 0.6  # oblique: not one hidden dimension
    e4, c4, placed = embed(torch.randn(8, 15), torch.randn(32, 15), torch.randn(32), 1.0, 1.0)
    assert frequency_shares(e4, c4)["share_c"] == pytest.approx(TRAINED_SHARE_C, abs=1e-5)
    assert placed["share_e"] == pytest.approx(frequency_shares(e4, c4)["share_e"], abs=1e-5)


def test_the_share_is_the_committed_trained_dumps_measured_one():
    dump = read_dump(DUMP)
    measured = frequency_shares(dump["e"], dump["c"])["share_c"]
    assert round(measured, 3) == TRAINED_SHARE_C


@pytest.mark.integration
def test_the_committed_dump_is_small_and_runs_through_perfsuite_run(tmp_path):
    assert DUMP.stat().st_size <= 20_000_000
    out = tmp_path / "r.json"
    argv = ["run", "--workload", str(DUMP), "--tokens", "64", "--methods", "eager", "--beta", "0"]
    argv += ["--phases", "fwd+bwd", "--samples", "2", "--warmup", "1", "--out", str(out)]
    assert main(argv) == 0
    (row,) = [r for r in json.loads(out.read_text())["rows"] if r["method"] == "eager"]
    assert row["status"] == "ok" and row["workload"] == f"file:{DUMP.name}"
    with pytest.raises(WorkloadError, match="holds N=2048"):
        file_shape(parse_workload(str(DUMP)), 4096)
