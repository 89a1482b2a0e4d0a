"""Plans: validated arguments and up-front refusal of shapes a CPU cannot hold."""

from __future__ import annotations

import pytest

from perfsuite.plan.plan import PlanError, build_plan
from perfsuite.plan.shapes import PRESETS, get_shape


def _plan(**kw):
    kw.setdefault("shapes", [get_shape("smoke")])
    kw.setdefault("device", "cpu")
    return build_plan(**kw)


def test_defaults_cover_timed_methods_both_betas_all_phases():
    plan = _plan()
    assert "reference" not in plan.methods and "eager" in plan.methods
    assert plan.betas == [0.0, 0.1] and plan.phases == ["fwd", "bwd", "fwd+bwd"]
    assert plan.dtypes == ["fp32"]
    assert len(plan.cases()) == 2


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"betas": "0,1.5"}, "outside \\[0, 1\\]"),
        ({"betas": "x"}, "not a number"),
        ({"methods": "eager,nope"}, "unknown method\\(s\\) nope"),
        ({"phases": "fwd,sideways"}, "unknown sideways"),
        ({"dtype": "fp8"}, "unknown fp8"),
        ({"samples": 0}, "samples"),
        # The protocol's bounds argparse's types do not check.
        ({"warmup": -1}, "--warmup"),
        ({"workload": {"kind": "synthetic", "entropy": 100.0, "zipf": 1.0}}, "log V"),
    ],
)
def test_bad_arguments_are_named(kw, message):
    with pytest.raises(PlanError, match=message):
        _plan(**kw)


def test_cpu_refuses_a_shape_whose_logits_cannot_fit():
    with pytest.raises(PlanError) as err:
        _plan(shapes=[get_shape("gemma2-9b")])
    text = str(err.value)
    assert "N x V logits" in text and "--shape smoke" in text and "--device cuda" in text


def test_overrides_make_a_big_preset_fit():
    shape = get_shape("gemma2-2b").with_overrides(tokens=16, vocab=1000, hidden=32)
    plan = _plan(shapes=[shape])
    assert plan.cases()[0]["tokens"] == 16 and plan.cases()[0]["shape"] == "gemma2-2b*"


def test_presets_match_the_issue():
    gemma = PRESETS["gemma2-2b"]
    assert (gemma.tokens, gemma.vocab, gemma.hidden, gemma.softcap, gemma.dtype) == (
        8192, 256000, 2304, 30.0, "bf16"
    )  # fmt: skip
    assert (PRESETS["qwen2.5-7b"].vocab, PRESETS["qwen2.5-7b"].hidden) == (152064, 3584)
    with pytest.raises(ValueError, match="unknown shape"):
        get_shape("gpt5")


def test_each_preset_runs_in_its_own_dtype_unless_dtype_says():
    """`run --shape smoke,llama3-8b` ran each preset in both presets' dtypes."""
    shapes = [get_shape("smoke"), get_shape("llama3-8b").with_overrides(tokens=16, vocab=64)]
    plan = _plan(shapes=shapes)
    assert {(c["shape"], c["dtype"]) for c in plan.cases()} == {
        ("smoke", "fp32"),
        ("llama3-8b*", "bf16"),
    }
    assert len(plan.cases()) == 2 * 2  # two presets x two β, not x two dtypes
    assert sorted(plan.dtypes) == ["bf16", "fp32"]  # the record keeps their union
    forced = _plan(shapes=shapes, dtype="fp16")
    assert {c["dtype"] for c in forced.cases()} == {"fp16"} and len(forced.cases()) == 4
