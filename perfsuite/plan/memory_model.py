"""Analytic memory figures from math.md: the floor every method must pay, and
what materialising the logits costs (used to refuse shapes that cannot fit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def floor_bytes(phase: str, tokens: int, vocab: int, hidden: int, dtype: str) -> int:
    """Lower bound on a phase's peak above its inputs (math.md, "Memory lower bound").

    The forward must return N per-token losses (fp32); any phase that ends with
    gradients must hold dE (N x D) and dC (V x D) in the input dtype.
    """
    if phase == "fwd":
        return tokens * 4
    return (tokens + vocab) * hidden * DTYPE_BYTES[dtype]


def reference_bytes(tokens: int, vocab: int, hidden: int, dtype: str = "bf16") -> int:
    """Peak of the correctness gate's reference fwd+bwd: logits, log-softmax and their
    gradient, plus copies of the inputs and their gradients. Every cell computes it
    in fp32, and for fp32 cases also in fp64 (torch's own fp32 error, see
    ``perfsuite.run.correctness``), which sets the peak there."""
    size = 8 if dtype == "fp32" else 4
    return 3 * tokens * vocab * size + 4 * (tokens + vocab) * hidden * size


def available_memory() -> int | None:
    """``MemAvailable`` of this machine in bytes, if the kernel reports it."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# Copies of the N x V logits (in the input dtype) eager holds at its peak, (without,
# with) softcap: the gate runs eager. Each method declares its own
# (``perfsuite.method.Capabilities.logit_copies``).
EAGER_LOGIT_COPIES = (4.0, 7.0)
# Share of available RAM a CPU run may plan to use.
CPU_MEMORY_SHARE = 0.8
# Share of a GPU's memory a cell may plan to use (context, allocator slack).
CUDA_MEMORY_SHARE = 0.92


def gate_bytes(tokens: int, vocab: int, hidden: int, dtype: str, softcap: bool = False) -> int:
    """What every cell's worker needs at least: e, c and their gradients, then the
    correctness gate (the fp32 reference, ``reference_bytes``, and eager in the
    input dtype), whichever method it times."""
    size = DTYPE_BYTES[dtype]
    tensors = 2 * (tokens + vocab) * hidden * size  # inputs and their gradients
    eager = tensors + EAGER_LOGIT_COPIES[softcap] * tokens * vocab * size
    return int(max(reference_bytes(tokens, vocab, hidden, dtype) + tensors, eager))


_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def fmt_size(nbytes: float) -> str:
    """``512 B``, ``23.3 MiB``, ``2.0 PiB``: bytes in the largest binary unit they fill,
    one decimal (a shape a typo made huge read "~2235179424.3 GiB")."""
    if nbytes < 1024:
        return f"{nbytes:.0f} B"
    scale, unit = 1024.0, _UNITS[0]
    for name in _UNITS[1:]:
        if nbytes < scale * 1024:
            break
        scale, unit = scale * 1024, name
    return f"{nbytes / scale:.1f} {unit}"


def exceeds(need: int, what: str, capacity: int, device: str) -> str:
    """The one wording of "this cell will not fit" (``run`` refuses the shape with it,
    ``sweep`` records it as a skipped cell's reason)."""
    return (
        f"predicted peak ~{fmt_size(need)} ({what}) exceeds the {fmt_size(capacity)} this "
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
    """Rough peak bytes of one cell in its worker, and what drives it, for deciding
    whether to attempt the cell (``perfsuite.run.sweep``).

    Every cell's worker holds e, c and their gradients and, before timing, runs
    the correctness gate: the fp32 reference (``reference_bytes``) and eager in
    the input dtype, so no cell needs less than that. A method whose ``caps``
    (``perfsuite.method.Capabilities``) say it materialises the logits holds its
    ``caps.logit_copies`` of them; the others (ours, CCE, Liger, torch's chunked path)
    stay near the floor.
    """
    size = DTYPE_BYTES[dtype]
    logits = tokens * vocab * size
    tensors = 2 * (tokens + vocab) * hidden * size  # inputs and their gradients
    gate = gate_bytes(tokens, vocab, hidden, dtype, softcap)
    if caps.materializes_logits:
        copies = caps.logit_copies[softcap]
        mine = tensors + copies * logits
        what = f"~{copies:g} copies of its N x V logits"
    else:
        mine = tensors + floor_bytes("fwd+bwd", tokens, vocab, hidden, dtype)
        what = "its gradients"
    if gate >= mine:
        what = "the correctness gate: fp32 reference and eager N x V logits"
    return int(max(gate, mine)), what


def device_capacity(device: str, memory_limit: int | None = None) -> int | None:
    """Bytes a cell may plan to use on ``device`` here (None: unknown, attempt all).

    CPU: ``CPU_MEMORY_SHARE`` of available RAM (and at most ``memory_limit``);
    CUDA: ``CUDA_MEMORY_SHARE`` of GPU 0's total, from nvidia-smi so that the
    parent process never creates a CUDA context.
    """
    if device == "cpu":
        available = available_memory()
        budget = None if available is None else int(CPU_MEMORY_SHARE * available)
        if memory_limit is not None:
            budget = memory_limit if budget is None else min(budget, memory_limit)
        return budget
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
