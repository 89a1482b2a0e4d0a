"""Training determinism and the per-step records."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from perfsuite.converge.data import Dataset, build_dataset
from perfsuite.converge.model import set_deterministic
from perfsuite.converge.parity import attach_verdicts
from perfsuite.converge.presets import PRESETS
from perfsuite.converge.runner import Cell, TrainKind
from perfsuite.converge.train import RunResult, train_run
from perfsuite.method import Capabilities, Case, LossFn, SimpleMethod
from perfsuite.plan.registry import all_methods, get_method

PRESET = replace(PRESETS["smoke"], steps=5)


@pytest.fixture(scope="module")
def eager() -> tuple[Dataset, RunResult]:
    """The smoke data and eager's run at β 0.1 on it, which the tests below train against."""
    set_deterministic(PRESET.seed)
    data = build_dataset(PRESET)
    return data, train_run(get_method("eager"), PRESET, data, 0.1, "fp32", "cpu")


def test_same_seed_gives_identical_eager_runs_and_smoothing_changes_them(eager):
    data, first = eager
    second = train_run(get_method("eager"), PRESET, data, 0.1, "fp32", "cpu")
    assert first.status == second.status == "ok", (first.reason, second.reason)
    assert first.losses == second.losses
    assert torch.equal(first.params, second.params)
    assert first.heldout == second.heldout
    # Every step records loss, gradient norm, time and peak memory.
    for record in first.steps:
        assert set(record) >= {"step", "loss", "grad_norm", "time_s", "peak_bytes"}
        assert record["grad_norm"] > 0 and record["time_s"] > 0
    assert first.losses[-1] < first.losses[0]
    held = first.heldout
    assert held["loss"] >= held["entropy_floor"] - 0.05  # nothing beats the truth
    assert held["perplexity"] > 1 and 0 <= held["accuracy"] <= 1
    attach_verdicts([first, second])
    assert first.parity == {"verdict": "reference"}
    plain = train_run(get_method("eager"), PRESET, data, 0.0, "fp32", "cpu")
    assert plain.losses[0] != first.losses[0]
    assert not torch.equal(plain.params, first.params)


def test_out_of_memory_in_the_loss_is_recorded_as_oom(eager):
    def build(case: Case, c: torch.Tensor) -> LossFn:
        def loss_fn(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            raise torch.OutOfMemoryError("deliberate: tried to allocate 9.00 GiB")

        return loss_fn

    method = SimpleMethod("oom", "runs out of memory", build, Capabilities(label_smoothing=True))
    run = train_run(method, PRESET, eager[0], 0.1, "fp32", "cpu")
    assert run.status == "oom" and "9.00 GiB" in run.reason and "\n" not in run.reason
    assert run.steps == [] and run.params is None


def test_z_loss_trains_ours_like_eager_and_others_say_why_not(eager):
    """--z-loss: ours (native z_loss) stays with eager (explicit z·lse²), both differ from
    training without it; a method without z-loss is unsupported, never trained plainly."""
    data, plain = eager
    with_z = replace(PRESET, z_loss=1e-2)
    eager = train_run(get_method("eager"), with_z, data, 0.1, "fp32", "cpu")
    ours = train_run(get_method("ours"), with_z, data, 0.1, "fp32", "cpu")
    yard = train_run(get_method("eager-reordered"), with_z, data, 0.1, "fp32", "cpu")
    assert eager.status == ours.status == yard.status == "ok", (eager.reason, ours.reason)
    assert eager.losses[0] > plain.losses[0]  # z·lse² > 0 is in the loss
    attach_verdicts([eager, yard, ours])
    assert ours.parity["verdict"] == "same", ours.parity
    kind = TrainKind(all_methods(), with_z, "bigram", "cpu", 1, 60.0)
    (gap,) = kind.decided("liger", kind.case(Cell("liger", 0.1, "fp32")))
    assert gap["status"] in ("unsupported", "unavailable") and gap["steps"] == []
    if gap["status"] == "unsupported":
        assert "no z-loss" in gap["reason"]
