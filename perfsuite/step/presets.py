"""Model presets of ``perfsuite step``: the real models' Hub configs, written out (nothing
is downloaded); ``--layers``, ``--seq`` and ``--batch`` shrink a run, never V or D."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfsuite.plan.memory_model import Network

# Llama 3.1/3.2's long-context RoPE (``rope_scaling`` of their configs).
LLAMA3_ROPE = {
    "rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}  # fmt: skip


@dataclass(frozen=True)
class StepPreset:
    """One causal LM's architecture; ``layers`` and ``max_positions`` are the real model's."""

    name: str
    family: str  # transformers model_type: llama, mistral, qwen2, gemma2
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    max_positions: int
    rope_theta: float
    rms_norm_eps: float
    rope_scaling: dict[str, Any] | None = None
    # Gemma2: the final logits' tanh cap (the loss's softcap) and the attention scores'.
    softcap: float | None = None
    attn_softcap: float | None = None
    query_pre_attn_scalar: int | None = None
    sliding_window: int | None = None
    source: str = ""  # the Hub model whose config this is

    def parameters(self, layers: int) -> int:
        """Parameters of the model cut to ``layers`` decoder layers (embeddings counted
        once when tied), as transformers builds it (checked in tests/step)."""
        d, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = d * q + 2 * d * kv + q * d + ((q + 2 * kv) if self.family == "qwen2" else 0)
        norms = (4 if self.family == "gemma2" else 2) * d
        layer = attention + 3 * d * self.intermediate + norms
        heads = 1 if self.tied else 2
        return heads * self.vocab * d + layers * layer + d

    def network(self, size: Size) -> Network:
        """What the memory model needs of this model at ``size``. Saved for the backward,
        per token and layer: the norms' inputs, q/k/v/o, the MLP's gate, up and product,
        plus the scores of eager attention (Gemma2); SDPA keeps none of the S x S."""
        d = self.hidden
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim
        per_token = 10 * d + 4 * qkv + 5 * self.intermediate
        if self.attn_softcap is not None:  # eager attention: scores, capped, softmax
            per_token += 3 * self.heads * size.seq
        activations = size.tokens * (size.layers * per_token + 4 * d)
        return Network(
            self.parameters(size.layers), activations, size.tokens, self.vocab, d, self.tied,
            self.softcap is not None,
        )  # fmt: skip


PRESETS: dict[str, StepPreset] = {
    p.name: p
    for p in (
        StepPreset(
            "gemma2-2b", "gemma2", 256000, 2304, 9216, 26, 8, 4, 256, True, 8192, 10000.0,
            1e-6, softcap=30.0, attn_softcap=50.0, query_pre_attn_scalar=256,
            sliding_window=4096, source="google/gemma-2-2b",
        ),
        StepPreset(
            "gemma2-9b", "gemma2", 256000, 3584, 14336, 42, 16, 8, 256, True, 8192, 10000.0,
            1e-6, softcap=30.0, attn_softcap=50.0, query_pre_attn_scalar=256,
            sliding_window=4096, source="google/gemma-2-9b",
        ),
        StepPreset(
            "llama3-8b", "llama", 128256, 4096, 14336, 32, 32, 8, 128, False, 8192, 500000.0,
            1e-5, source="meta-llama/Meta-Llama-3-8B",
        ),
        StepPreset(
            "llama3.2-1b", "llama", 128256, 2048, 8192, 16, 32, 8, 64, True, 131072, 500000.0,
            1e-5, rope_scaling=LLAMA3_ROPE, source="meta-llama/Llama-3.2-1B",
        ),
        StepPreset(
            "llama3.2-3b", "llama", 128256, 3072, 8192, 28, 24, 8, 128, True, 131072, 500000.0,
            1e-5, rope_scaling=LLAMA3_ROPE, source="meta-llama/Llama-3.2-3B",
        ),
        StepPreset(
            "mistral-7b", "mistral", 32768, 4096, 14336, 32, 32, 8, 128, False, 32768, 1e6,
            1e-5, source="mistralai/Mistral-7B-v0.3",
        ),
        StepPreset(
            "qwen2.5-7b", "qwen2", 152064, 3584, 18944, 28, 28, 4, 128, False, 131072, 1e6,
            1e-6, source="Qwen/Qwen2.5-7B",
        ),
        # run's smoke shape (V=2048, D=128) as a two-layer Llama: every method, seconds.
        StepPreset(
            "smoke", "llama", 2048, 128, 256, 2, 4, 2, 32, False, 4096, 10000.0, 1e-5,
            source="(tiny, no Hub model)",
        ),
    )
}  # fmt: skip


def get_preset(name: str) -> StepPreset:
    if name not in PRESETS:
        raise ValueError(f"--model: unknown model {name!r}; presets: {', '.join(PRESETS)}")
    return PRESETS[name]


@dataclass(frozen=True)
class Size:
    """How much of the model one step runs: decoder layers and the batch's shape."""

    layers: int
    seq: int
    batch: int

    @property
    def tokens(self) -> int:
        return self.seq * self.batch

    def label(self) -> str:
        """The rows' ``workload``: part of the cell key, so that a step cell never
        matches a loss-only cell of the same N, V, D."""
        return f"step(layers={self.layers},seq={self.seq},batch={self.batch})"


# Defaults per device: a CPU step of a real vocabulary takes seconds already.
DEFAULT_SIZE = {"cpu": Size(layers=1, seq=256, batch=1), "cuda": Size(layers=2, seq=4096, batch=2)}


def size_for(
    preset: StepPreset, device: str, layers: int | None, seq: int | None, batch: int | None
) -> Size:
    """The size a preset runs at: the given values (argparse checked they are positive),
    else the device's defaults, layers capped at the model's; ``ValueError`` for sizes
    the model cannot take."""
    default = DEFAULT_SIZE[device]
    size = Size(
        layers=min(default.layers, preset.layers) if layers is None else layers,
        seq=seq or default.seq,
        batch=batch or default.batch,
    )
    if size.layers > preset.layers:
        raise ValueError(f"--layers {size.layers}: {preset.name} has {preset.layers} layers")
    if size.seq > preset.max_positions:
        raise ValueError(
            f"--seq {size.seq}: {preset.name} takes at most {preset.max_positions} positions"
        )
    if size.seq < 2:
        raise ValueError("--seq must be >= 2: a causal LM's loss needs a next token")
    return size
