"""The one memory model (math.md): the floor every method must pay, what a method's loss
holds by its ``Holds`` declaration, and a loss cell's and a training step's peaks built
from them (to skip what cannot fit before it starts)."""

from __future__ import annotations

import math
from contextlib import suppress
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from perfsuite.units import fmt_bytes

if TYPE_CHECKING:  # torch: loaded where a method is
    from perfsuite.method import Holds

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp64": 8}
GIB = 2**30


def floor_bytes(phase: str, tokens: int, vocab: int, hidden: int, dtype: str) -> int:
    """Lower bound on a phase's peak above its inputs (math.md): N fp32 losses, or dE
    and dC in the input dtype for a phase that ends with gradients."""
    if phase == "fwd":
        return tokens * 4
    return (tokens + vocab) * hidden * DTYPE_BYTES[dtype]


def held_bytes(holds: Holds, tokens: int, vocab: int, hidden: int, width: int, cap: bool) -> int:
    """What a loss holds at its peak beyond its inputs and their gradients, at ``width``
    bytes a value: ``copies`` of the N x V logits held whole; token chunks of about N x D
    logits (and fp32 dE); else dE in fp32 and a workspace (ours, CCE)."""
    n, v, d = tokens, vocab, hidden
    if holds.whole_logits:
        return int(holds.copies[cap] * n * v * width)
    if holds.kind == "fused":
        rows = min(n, max(1, math.ceil(n / max(1, math.ceil(v / d)))))
        return rows * v * (width + 4) + 2 * n * d * 4
    return 2 * n * d * 4


def available_memory() -> int:
    """The RAM this machine has available now (Linux: ``MemAvailable``), in bytes."""
    import psutil

    return int(psutil.virtual_memory().available)


# Shares of the available RAM (CPU) and of a GPU's memory (context, allocator slack) that
# a cell may plan to use.
CPU_MEMORY_SHARE = 0.8
CUDA_MEMORY_SHARE = 0.92


def gate_bytes(tokens: int, vocab: int, hidden: int, dtype: str, softcap: bool = False) -> int:
    """What every cell's worker needs at least, whichever method it times: e, c and their
    gradients, then the correctness gate's reference fwd+bwd (logits, log-softmax, their
    gradient, the inputs and theirs; a softcap's tanh one copy more, as measured in
    tests/plan/test_memory_model.py) in fp32, or fp64 for fp32 cases (torch's own error),
    and eager in the input dtype."""
    from perfsuite.method import Holds  # torch: only where it is needed

    size, ref = DTYPE_BYTES[dtype], 8 if dtype == "fp32" else 4
    tensors = 2 * (tokens + vocab) * hidden * size  # inputs and their gradients
    reference = (3 + softcap) * tokens * vocab * ref + 4 * (tokens + vocab) * hidden * ref
    eager = tensors + held_bytes(Holds(), tokens, vocab, hidden, size, softcap)
    return int(max(reference + tensors, eager))


def exceeds(need: int, what: str, capacity: int, device: str) -> str:
    """The one wording of "this cell will not fit"."""
    return (
        f"predicted peak ~{fmt_bytes(need)} ({what}) exceeds the {fmt_bytes(capacity)} this "
        f"{device} can give a cell (memory model, docs/math.md)"
    )


def predicted_peak(
    caps: Any, tokens: int, vocab: int, hidden: int, dtype: str, softcap: bool = False
) -> tuple[int, str]:
    """Rough peak bytes of one cell in its worker, and what drives it: at least the
    correctness gate's (``gate_bytes``), or what its ``caps.holds`` says it holds."""
    size = DTYPE_BYTES[dtype]
    gate = gate_bytes(tokens, vocab, hidden, dtype, softcap)
    mine = 2 * (tokens + vocab) * hidden * size  # inputs and their gradients
    mine += held_bytes(caps.holds, tokens, vocab, hidden, size, softcap)
    what = "its gradients"
    if caps.holds.whole_logits:
        what = f"~{caps.holds.copies[softcap]:g} copies of its N x V logits"
    if gate >= mine:
        what = "the correctness gate: fp32 reference and eager N x V logits"
    return int(max(gate, mine)), what


def device_capacity(device: str, memory_limit: int | None = None) -> int | None:
    """Bytes a cell may plan to use on ``device`` (None: unknown): a share of the RAM
    available (at most ``memory_limit``), or of GPU 0's total from nvidia-smi (no CUDA
    context in the parent)."""
    if device == "cpu":
        budget = int(CPU_MEMORY_SHARE * available_memory())
        return budget if memory_limit is None else min(budget, memory_limit)
    from perfsuite.results.provenance import gpu_state

    with suppress(TypeError, ValueError):  # MiB, as nvidia-smi says it
        return int(CUDA_MEMORY_SHARE * float((gpu_state() or {}).get("memory.total")) * 2**20)
    try:
        import torch

        return int(CUDA_MEMORY_SHARE * torch.cuda.get_device_properties(0).total_memory)
    except Exception:  # noqa: BLE001 - no way to know: attempt every cell
        return None


def capacity_for(device: str, memory_limit: int | None) -> tuple[int | None, str]:
    """What a worker may take and why: ``--memory-limit`` when it is the smaller bound,
    else a share of the RAM available now (CPU) or of the GPU's memory."""
    capacity = device_capacity(device)
    if memory_limit is not None and (capacity is None or memory_limit <= capacity):
        return memory_limit, "--memory-limit"
    if device == "cpu":
        return capacity, f"{CPU_MEMORY_SHARE:.0%} of the RAM available now"
    return capacity, f"{CUDA_MEMORY_SHARE:.0%} of the GPU's memory"


@dataclass(frozen=True)
class Network:
    """What a training step's memory depends on besides its loss (``perfsuite.step``'s
    model cut to the layers it runs, and its batch)."""

    parameters: int
    activations: int  # values the decoder saves for its backward
    tokens: int
    vocab: int
    hidden: int
    tied: bool  # the head is the embedding: a second V x D gradient before they are summed
    softcap: bool


@dataclass(frozen=True)
class Estimate:
    """Bytes of one training step, by part, and of the correctness gate run before it."""

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
    def need(self) -> int:
        step = self.weights + self.grads + self.adamw + self.temporaries + self.activations
        return max(step + self.loss, self.gate) + self.runtime

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "need": self.need}

    def too_big(self, capacity: int | None, what: str) -> str | None:
        """The ``skipped`` reason when the step cannot fit ``capacity`` bytes (None: it fits)."""
        if capacity is None or self.need <= capacity:
            return None
        gib = {k: v / GIB for k, v in self.as_dict().items()}
        return (
            f"predicted ≈ {gib['need']:.1f} GiB: weights {gib['weights']:.2f}, grads "
            f"{gib['grads']:.2f}, AdamW states {gib['adamw']:.2f}, temporaries "
            f"{gib['temporaries']:.2f}, activations {gib['activations']:.2f}, loss "
            f"{gib['loss']:.2f}, runtime {gib['runtime']:.2f} GiB; correctness gate's "
            f"references {gib['gate']:.1f} GiB; over the {capacity / GIB:.1f} GiB {what}"
        )


# What a worker holds before its model: measured ~0.5 GiB RSS on CPU (torch,
# transformers); on CUDA the context lives outside the allocator's count.
RUNTIME_BYTES = {"cpu": GIB // 2, "cuda": 0}


def step_estimate(holds: Holds, net: Network, dtype: str, device: str) -> Estimate:
    """A training step's memory in ``dtype`` with a loss that ``holds`` what its method
    declares, estimated before anything runs: within tens of percent."""
    from perfsuite.method import Holds  # torch: only where it is needed

    width, params = DTYPE_BYTES[dtype], net.parameters
    head = net.vocab * net.hidden
    tied = head if net.tied else 0

    def loss(what: Holds, w: int) -> int:
        return held_bytes(what, net.tokens, net.vocab, net.hidden, w, net.softcap)

    def eager(w: int) -> int:  # one pass of eager at w bytes a value, beyond its weights
        return w * (tied + net.activations) + loss(Holds(), w)

    # fp32: fp64 eager (weights, grads), then fp32 beside the fp64 gradients; else the
    # fp32 reference (weights, grads), then the dtype's eager beside its gradients.
    gate = 16 * params + max(eager(8), eager(4)) if dtype == "fp32" else 8 * params + eager(4)
    optimizer = (2 * head if device == "cpu" else params) * width
    return Estimate(
        weights=params * width,
        grads=params * width,
        adamw=2 * params * width,
        temporaries=max(tied * width, optimizer),
        activations=net.activations * width,
        loss=loss(holds, width),
        gate=gate,
        runtime=RUNTIME_BYTES.get(device, 0),
    )
