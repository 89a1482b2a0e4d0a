"""The model a step trains (a transformers causal LM from a preset), its batch, and the
losses every method is measured against. Worker-side only: it imports transformers."""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F

from perfsuite.step.presets import Size, StepPreset

IGNORE_INDEX = -100
CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
}


def attention_for(preset: StepPreset) -> str:
    """SDPA, as training uses; Gemma2's capped attention scores need the eager path
    (transformers says so for Gemma2)."""
    return "eager" if preset.attn_softcap is not None else "sdpa"


def build_config(preset: StepPreset, layers: int) -> Any:
    """The transformers config of ``preset`` cut to ``layers`` decoder layers."""
    import transformers

    p = preset
    kwargs: dict[str, Any] = dict(
        vocab_size=p.vocab, hidden_size=p.hidden, intermediate_size=p.intermediate,
        num_hidden_layers=layers, num_attention_heads=p.heads, num_key_value_heads=p.kv_heads,
        max_position_embeddings=p.max_positions, rms_norm_eps=p.rms_norm_eps,
        tie_word_embeddings=p.tied, attention_dropout=0.0, attn_implementation=attention_for(p),
    )  # fmt: skip
    if p.family != "qwen2":  # Qwen2 derives head_dim = hidden / heads
        kwargs["head_dim"] = p.head_dim
    kwargs.update({
        "gemma2": dict(
            final_logit_softcapping=p.softcap, attn_logit_softcapping=p.attn_softcap,
            query_pre_attn_scalar=p.query_pre_attn_scalar, sliding_window=p.sliding_window,
            hidden_activation="gelu_pytorch_tanh",
        ),
        "mistral": dict(sliding_window=p.sliding_window),
        "qwen2": dict(use_sliding_window=False),
    }.get(p.family, {}))  # fmt: skip
    config_cls = getattr(transformers, CLASSES[p.family][0])
    rope = {"rope_type": "default", **(p.rope_scaling or {}), "rope_theta": p.rope_theta}
    if "rope_parameters" in inspect.signature(config_cls.__init__).parameters:
        kwargs["rope_parameters"] = rope
    else:  # transformers 4.x
        kwargs["rope_theta"] = p.rope_theta
        kwargs["rope_scaling"] = p.rope_scaling
    return config_cls(**kwargs)


def model_class(preset: StepPreset) -> type:
    import transformers

    return getattr(transformers, CLASSES[preset.family][1])


def build_model(preset: StepPreset, size: Size, seed: int, device: str) -> torch.nn.Module:
    """The model initialised from ``seed`` in fp32: the same weights in every worker
    (transformers 5: built on the meta device and initialised once, half the time)."""
    import transformers

    model_cls = model_class(preset)
    config = build_config(preset, size.layers)
    torch.manual_seed(seed)
    if int(transformers.__version__.split(".")[0]) >= 5:
        with torch.device("meta"):
            model = model_cls(config)
        model.to_empty(device=device)
        model.init_weights()
    else:
        model = model_cls(config)
    if preset.tied and model.lm_head.weight is not model.model.embed_tokens.weight:
        raise RuntimeError(f"{model_cls.__name__}: lm_head is not tied to the embedding after init")
    return model.to(device=device, dtype=torch.float32).train()


def make_batch(preset: StepPreset, size: Size, seed: int, device: str) -> torch.Tensor:
    """Token ids ``(batch, seq)``, uniform over the vocabulary; the labels are the ids
    themselves (the model shifts them, as transformers' causal LMs do)."""
    generator = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, preset.vocab, (size.batch, size.seq), generator=generator)
    return ids.to(device)


def eager_loss(model: torch.nn.Module, ids: torch.Tensor, beta: float) -> torch.Tensor:
    """The model's own loss (``forward(labels=...)``) on materialised logits, at β > 0
    ``reference_loss`` (the model's lacks smoothing)."""
    return model(input_ids=ids, labels=ids).loss if beta == 0 else reference_loss(model, ids, beta)


def reference_loss(model: torch.nn.Module, ids: torch.Tensor, beta: float) -> torch.Tensor:
    """transformers' ``ForCausalLMLoss`` (labels padded and shifted, mean over the valid
    ones) with label smoothing β, which the model's own loss lacks (its kwargs never reach
    ``F.cross_entropy``; the Trainer smooths outside), in the model's own precision, at
    least fp32 (``ForCausalLMLoss`` would cast fp64 logits down to fp32, spoiling the fp64
    pass of the correctness gate)."""
    logits = model(input_ids=ids).logits
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    targets = F.pad(ids, (0, 1), value=IGNORE_INDEX)[..., 1:]
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        targets.reshape(-1).to(logits.device),
        ignore_index=IGNORE_INDEX,
        label_smoothing=beta,
    )


def trivial_loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """A loss that costs next to nothing on the decoder's last hidden states: the step
    with it is the model without its loss (the loss share's subtrahend)."""
    hidden = model.model(input_ids=ids).last_hidden_state
    return hidden.float().square().mean()


def describe_model(model: torch.nn.Module, preset: StepPreset, size: Size) -> dict[str, Any]:
    """What was built, for the results' provenance."""
    cfg = model.config
    return {
        "class": type(model).__name__,
        "source": preset.source,
        "layers": f"{size.layers} of {preset.layers}",
        "vocab": cfg.vocab_size,
        "hidden": cfg.hidden_size,
        "intermediate": cfg.intermediate_size,
        "heads": cfg.num_attention_heads,
        "kv_heads": cfg.num_key_value_heads,
        "tied_embeddings": bool(cfg.tie_word_embeddings),
        "final_logit_softcapping": getattr(cfg, "final_logit_softcapping", None),
        "attn_logit_softcapping": getattr(cfg, "attn_logit_softcapping", None),
        "attn_implementation": attention_for(preset),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
