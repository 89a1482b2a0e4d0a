"""Presets are the real models' configs, their parameter counts are what transformers
builds, and the memory estimate orders the methods and dtypes the way the step does."""

from __future__ import annotations

import pytest
import torch

from perfsuite.plan.memory_model import held_bytes, step_estimate
from perfsuite.plan.registry import methods_for
from perfsuite.step.presets import PRESETS, Size, get_preset, size_for

REAL = [name for name in PRESETS if name != "smoke"]


def test_the_run_presets_that_are_causal_lms_are_all_here():
    from perfsuite.plan.shapes import PRESETS as RUN_PRESETS

    assert set(PRESETS) == set(RUN_PRESETS)
    for name in REAL:  # the last layer a step ends in is run's shape
        step, run = PRESETS[name], RUN_PRESETS[name]
        assert (step.vocab, step.hidden, step.softcap) == (run.vocab, run.hidden, run.softcap)


def test_llama32_1b_is_the_hub_config():
    p = get_preset("llama3.2-1b")
    got = (p.hidden, p.vocab, p.layers, p.intermediate, p.heads, p.kv_heads, p.head_dim, p.tied)
    assert got == (2048, 128256, 16, 8192, 32, 8, 64, True)
    assert p.parameters(p.layers) == 1_235_814_400  # Llama-3.2-1B's 1.24B


@pytest.mark.parametrize("name", list(PRESETS))
def test_parameter_counts_are_what_transformers_builds(name):
    import transformers

    from perfsuite.step.model import CLASSES, build_config

    preset = PRESETS[name]
    for layers in (1, 2):
        config = build_config(preset, layers)
        with torch.device("meta"):
            model = getattr(transformers, CLASSES[preset.family][1])(config)
        assert sum(p.numel() for p in model.parameters()) == preset.parameters(layers)
        assert config.vocab_size == preset.vocab and config.hidden_size == preset.hidden
        assert bool(config.tie_word_embeddings) == preset.tied
        assert getattr(config, "final_logit_softcapping", None) == preset.softcap
        assert getattr(config, "attn_logit_softcapping", None) == preset.attn_softcap
        assert model.model.layers[0].self_attn.head_dim == preset.head_dim


def test_sizes_default_by_device_and_refuse_what_the_model_cannot_take():
    p = get_preset("gemma2-2b")
    assert size_for(p, "cpu", None, None, None) == Size(1, 256, 1)
    assert size_for(p, "cuda", None, None, None).tokens == 8192
    assert size_for(get_preset("smoke"), "cuda", None, None, None).layers == 2  # its own
    with pytest.raises(ValueError, match="26 layers"):
        size_for(p, "cpu", 27, None, None)
    with pytest.raises(ValueError, match="8192 positions"):
        size_for(p, "cpu", 1, 8193, None)


def test_the_estimate_sees_eager_logits_and_the_dtype():
    p, net = get_preset("gemma2-2b"), get_preset("gemma2-2b").network(Size(1, 4096, 2))
    holds = {name: m.caps.holds for name, m in methods_for("step").items()}
    eager = step_estimate(holds["eager"], net, "bf16", "cuda")
    ours = step_estimate(holds["ours"], net, "bf16", "cuda")
    assert eager.loss == held_bytes(holds["eager"], 8192, 256000, 2304, 2, True)  # run's rule
    assert eager.loss > 8192 * 256000 * 8 > 20 * ours.loss  # N x V logits, several copies
    assert eager.weights == ours.weights == 2 * p.parameters(1)
    fp32 = step_estimate(holds["ours"], net, "fp32", "cuda")
    assert fp32.weights == 2 * ours.weights and fp32.adamw == 2 * ours.adamw
    assert fp32.gate > fp32.weights * 4  # the fp64 pass: weights and grads in fp64
    assert ours.too_big(ours.need, "limit") is None
    reason = ours.too_big(ours.need - 1, "--memory-limit")
    assert reason and "AdamW" in reason and "--memory-limit" in reason
