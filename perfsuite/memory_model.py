"""Analytic memory figures from math.md: the floor every method must pay, and
what materialising the logits costs (used to refuse shapes that cannot fit)."""

from __future__ import annotations

from pathlib import Path

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def floor_bytes(phase: str, tokens: int, vocab: int, hidden: int, dtype: str) -> int:
    """Lower bound on a phase's peak above its inputs (math.md, "Memory lower bound").

    The forward must return N per-token losses (fp32); any phase that ends with
    gradients must hold dE (N x D) and dC (V x D) in the input dtype.
    """
    if phase == "fwd":
        return tokens * 4
    return (tokens + vocab) * hidden * DTYPE_BYTES[dtype]


def reference_bytes(tokens: int, vocab: int, hidden: int) -> int:
    """Peak of the fp32 reference fwd+bwd: logits, log-softmax and their gradient,
    plus fp32 copies of the inputs and their gradients. Every cell computes it."""
    return 3 * tokens * vocab * 4 + 4 * (tokens + vocab) * hidden * 4


def available_memory() -> int | None:
    """``MemAvailable`` of this machine in bytes, if the kernel reports it."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
