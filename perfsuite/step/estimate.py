"""How much memory one method's training step needs, estimated before anything runs (a
worker that cannot fit costs minutes, then dies): a case over the limit is an ``oom``
row. Within tens of percent."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from perfsuite.step.presets import Size, StepPreset

BYTES = {"fp32": 4, "bf16": 2}
GIB = 2**30


def activation_bytes(preset: StepPreset, size: Size, width: int) -> int:
    """Tensors the decoder saves for its backward: per token and layer the norms'
    inputs, q/k/v/o, the MLP's gate, up and product, plus the scores of eager attention
    (Gemma2); SDPA keeps none of the S x S."""
    d, i = preset.hidden, preset.intermediate
    qkv = (preset.heads + 2 * preset.kv_heads) * preset.head_dim
    per_token = 10 * d + 4 * qkv + 5 * i
    if preset.attn_softcap is not None:  # eager attention: scores, capped, softmax
        per_token += 3 * preset.heads * size.seq
    return size.tokens * (size.layers * per_token + 4 * d) * width


def loss_bytes(holds: str, preset: StepPreset, size: Size, width: int) -> int:
    """What the loss holds at its peak beyond the parameters' gradients."""
    n, v, d = size.tokens, preset.vocab, preset.hidden
    cap = preset.softcap is not None
    if holds == "logits":  # logits, the fp32 log-softmax and its gradient, the dtype's grad
        per = 2 * width + 8 + (2 * width if cap else 0)
        return n * v * per
    if holds == "compiled":  # fused: the logits and one fp32 buffer
        return n * v * (width + 4 + (width if cap else 0))
    if holds == "chunks":  # every chunk's logits kept, one chunk upcast at a time
        return n * v * width + math.ceil(n / 8) * v * 8
    if holds == "fused":  # Liger: token chunks of about N x D logits
        rows = min(n, max(1, math.ceil(n / max(1, math.ceil(v / d)))))
        return rows * v * (width + 4) + 2 * n * d * 4
    return 2 * n * d * 4  # tiles: dE and a workspace


@dataclass(frozen=True)
class Estimate:
    """Bytes of one step, by part, and of the correctness gate run before it."""

    weights: int
    grads: int
    adamw: int  # the two states
    # The larger of the backward's extra gradient of a tied head (the embedding's dense
    # gradient and the head's, summed) and AdamW's temporaries (CPU: its per-parameter
    # loop, about two copies of the largest parameter; CUDA: foreach, one of them all).
    temporaries: int
    activations: int
    loss: int
    gate: int
    runtime: int  # the worker process itself: Python, torch, transformers

    @property
    def step(self) -> int:
        return (
            self.weights + self.grads + self.adamw + self.temporaries + self.activations + self.loss
        )

    @property
    def need(self) -> int:
        return max(self.step, self.gate) + self.runtime

    def describe(self) -> str:
        gib = {k: v / GIB for k, v in self.as_dict().items()}
        return (
            f"≈ {gib['need']:.1f} GiB: weights {gib['weights']:.2f}, grads {gib['grads']:.2f}, "
            f"AdamW states {gib['adamw']:.2f}, temporaries {gib['temporaries']:.2f}, "
            f"activations {gib['activations']:.2f}, loss {gib['loss']:.2f}, runtime "
            f"{gib['runtime']:.2f} GiB; correctness gate's references {gib['gate']:.1f} GiB"
        )

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "need": self.need}


# What a worker holds before its model: measured ~0.5 GiB RSS on CPU (torch,
# transformers); on CUDA the context lives outside the allocator's count.
RUNTIME_BYTES = {"cpu": GIB // 2, "cuda": 0}


def estimate(holds: str, preset: StepPreset, size: Size, dtype: str, device: str) -> Estimate:
    """The step's memory with a loss that ``holds`` (its method's ``caps.holds.kind``), in
    ``dtype``."""
    width = BYTES[dtype]
    params = preset.parameters(size.layers)
    head = preset.vocab * preset.hidden
    tied = head if preset.tied else 0  # the second V x D gradient, before it is summed

    def eager(w: int) -> int:  # one pass of eager at w bytes a value, beyond its weights
        return w * tied + activation_bytes(preset, size, w) + loss_bytes("logits", preset, size, w)

    # fp32: fp64 eager (weights, grads), then fp32 beside the fp64 gradients; else the
    # fp32 reference (weights, grads), then the dtype's eager beside its gradients.
    gate = 16 * params + max(eager(8), eager(4)) if dtype == "fp32" else 8 * params + eager(4)
    optimizer = (2 * head if device == "cpu" else params) * width
    return Estimate(
        weights=params * width,
        grads=params * width,
        adamw=2 * params * width,
        temporaries=max(tied * width, optimizer),
        activations=activation_bytes(preset, size, width),
        loss=loss_bytes(holds, preset, size, width),
        gate=gate,
        runtime=RUNTIME_BYTES.get(device, 0),
    )


def too_big(est: Estimate, capacity: int | None, what: str) -> str | None:
    """The ``oom`` reason when ``est`` cannot fit ``capacity`` bytes (None: it fits)."""
    if capacity is None or est.need <= capacity:
        return None
    return f"predicted {est.describe()}; over the {capacity / GIB:.1f} GiB {what}"
