"""Analytic memory figures from math.md: the floor every method must pay, and
what materialising the logits costs (used to refuse shapes that cannot fit)."""

from __future__ import annotations

from typing import Any

from perfsuite.units import fmt_bytes

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def floor_bytes(phase: str, tokens: int, vocab: int, hidden: int, dtype: str) -> int:
    """Lower bound on a phase's peak above its inputs (math.md): N fp32 losses, or dE
    and dC in the input dtype for a phase that ends with gradients."""
    if phase == "fwd":
        return tokens * 4
    return (tokens + vocab) * hidden * DTYPE_BYTES[dtype]


def reference_bytes(
    tokens: int, vocab: int, hidden: int, dtype: str = "bf16", softcap: bool = False
) -> int:
    """Peak of the gate's reference fwd+bwd (logits, log-softmax, their gradient, the
    inputs and theirs; a softcap's tanh one copy more, as measured in
    tests/plan/test_memory_model.py): fp32, or fp64 for fp32 cases (torch's own error)."""
    size = 8 if dtype == "fp32" else 4
    return (3 + softcap) * tokens * vocab * size + 4 * (tokens + vocab) * hidden * size


def available_memory() -> int:
    """The RAM this machine has available now (Linux: ``MemAvailable``), in bytes."""
    import psutil

    return int(psutil.virtual_memory().available)


# Share of available RAM a CPU run may plan to use.
CPU_MEMORY_SHARE = 0.8
# Share of a GPU's memory a cell may plan to use (context, allocator slack).
CUDA_MEMORY_SHARE = 0.92


def gate_bytes(tokens: int, vocab: int, hidden: int, dtype: str, softcap: bool = False) -> int:
    """What every cell's worker needs at least: e, c and their gradients, then the
    correctness gate (the fp32 reference, ``reference_bytes``, and eager in the
    input dtype, holding the logits whole: ``method.Holds``'s), whichever method it times."""
    from perfsuite.method import Holds  # torch: only where it is needed

    size = DTYPE_BYTES[dtype]
    tensors = 2 * (tokens + vocab) * hidden * size  # inputs and their gradients
    eager = tensors + Holds().copies[softcap] * tokens * vocab * size
    return int(max(reference_bytes(tokens, vocab, hidden, dtype, softcap) + tensors, eager))


def exceeds(need: int, what: str, capacity: int, device: str) -> str:
    """The one wording of "this cell will not fit" (``run`` refuses the shape with it,
    ``sweep`` records it as a skipped cell's reason)."""
    return (
        f"predicted peak ~{fmt_bytes(need)} ({what}) exceeds the {fmt_bytes(capacity)} this "
        f"{device} can give a cell (memory model, docs/math.md)"
    )


def predicted_peak(
    caps: Any,
    tokens: int,
    vocab: int,
    hidden: int,
    dtype: str,
    softcap: bool = False,
) -> tuple[int, str]:
    """Rough peak bytes of one cell in its worker, and what drives it: at least the
    correctness gate's (``gate_bytes``), or the ``caps.holds.copies`` of the N x V
    logits a method that holds them whole keeps; the others stay near the floor."""
    size = DTYPE_BYTES[dtype]
    logits = tokens * vocab * size
    tensors = 2 * (tokens + vocab) * hidden * size  # inputs and their gradients
    gate = gate_bytes(tokens, vocab, hidden, dtype, softcap)
    if caps.holds.whole_logits:
        copies = caps.holds.copies[softcap]
        mine = tensors + copies * logits
        what = f"~{copies:g} copies of its N x V logits"
    else:
        mine = tensors + floor_bytes("fwd+bwd", tokens, vocab, hidden, dtype)
        what = "its gradients"
    if gate >= mine:
        what = "the correctness gate: fp32 reference and eager N x V logits"
    return int(max(gate, mine)), what


def device_capacity(device: str, memory_limit: int | None = None) -> int | None:
    """Bytes a cell may plan to use on ``device`` here (None: unknown, attempt all): a
    share of the RAM available (at most ``memory_limit``), or of GPU 0's total, from
    nvidia-smi so that the parent never creates a CUDA context."""
    if device == "cpu":
        budget = int(CPU_MEMORY_SHARE * available_memory())
        return budget if memory_limit is None else min(budget, memory_limit)
    from perfsuite.results.provenance import gpu_state

    total = (gpu_state() or {}).get("memory.total")
    try:
        return int(CUDA_MEMORY_SHARE * float(total) * 2**20)
    except (TypeError, ValueError):
        pass
    try:
        import torch

        return int(CUDA_MEMORY_SHARE * torch.cuda.get_device_properties(0).total_memory)
    except Exception:  # noqa: BLE001 - no way to know: attempt every cell
        return None
