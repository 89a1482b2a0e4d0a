"""Analytic time (docs/math.md): a phase's FLOPs and minimal bytes against a GPU's datasheet
peaks; the roofline is the larger of the two times."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfsuite.plan.memory_model import DTYPE_BYTES

FLOP_FACTOR = {"fwd": 2, "bwd": 6, "fwd+bwd": 8}


@dataclass(frozen=True)
class GPU:
    name: str
    # Dense peak TFLOP/s (no 2:4 sparsity). fp32 is the CUDA-core figure: the
    # suite leaves TF32 off (torch's default), so fp32 matmuls run at it.
    tflops: dict[str, float]
    hbm_tb_s: float  # memory bandwidth, TB/s (10^12 bytes/s)


# Dense figures: half of NVIDIA's "with sparsity" tensor-core numbers, from the H100 (2023),
# H200 (2024) and A100 (2021) Tensor Core GPU datasheets.
GPUS: dict[str, GPU] = {
    g.name: g
    for g in (
        GPU("H100 SXM", {"bf16": 989.5, "fp16": 989.5, "fp32": 67.0}, 3.35),
        GPU("H100 PCIe", {"bf16": 756.5, "fp16": 756.5, "fp32": 51.0}, 2.0),
        GPU("H100 NVL", {"bf16": 835.5, "fp16": 835.5, "fp32": 60.0}, 3.9),
        GPU("H200 SXM", {"bf16": 989.5, "fp16": 989.5, "fp32": 67.0}, 4.8),
        GPU("H200 NVL", {"bf16": 835.5, "fp16": 835.5, "fp32": 60.0}, 4.8),
        GPU("A100 SXM 80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 2.039),
        GPU("A100 PCIe 80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 1.935),
        GPU("A100 40GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 1.555),
    )
}


def identify_gpu(name: str | None) -> GPU | None:
    """The datasheet entry for a device name as nvidia-smi / torch report it, e.g.
    ``NVIDIA H100 80GB HBM3`` (SXM), ``NVIDIA H200``, ``NVIDIA A100-SXM4-80GB``."""
    if not name:
        return None
    text = name.upper().replace("-", " ")
    if "H200" in text:
        return GPUS["H200 NVL" if "NVL" in text else "H200 SXM"]
    if "H100" in text:
        return GPUS["H100 NVL" if "NVL" in text else "H100 PCIe" if "PCIE" in text else "H100 SXM"]
    if "A100" in text:
        if "80GB" in text.replace(" ", ""):
            return GPUS["A100 PCIe 80GB" if "PCIE" in text else "A100 SXM 80GB"]
        return GPUS["A100 40GB"]
    return None


def gpu_for_env(env: dict[str, Any]) -> GPU | None:
    """The known GPU a results file was measured on, or None (CPU, unknown GPU)."""
    device = env.get("device") or {}
    return identify_gpu(device.get("name")) if device.get("kind") == "cuda" else None


def phase_flops(phase: str, tokens: int, vocab: int, hidden: int) -> float:
    return FLOP_FACTOR[phase] * tokens * vocab * hidden


def phase_bytes(phase: str, tokens: int, vocab: int, hidden: int, dtype: str) -> float:
    """Minimal HBM traffic: e and c read per pass, fp32 losses and dE, dC written."""
    inputs = (tokens + vocab) * hidden * DTYPE_BYTES[dtype]
    losses = tokens * 4
    return {"fwd": inputs + losses, "bwd": 2 * inputs, "fwd+bwd": 3 * inputs + losses}[phase]


def roofline_ms(phase: str, tokens: int, vocab: int, hidden: int, dtype: str, gpu: GPU) -> float:
    compute = phase_flops(phase, tokens, vocab, hidden) / (gpu.tflops[dtype] * 1e12)
    memory = phase_bytes(phase, tokens, vocab, hidden, dtype) / (gpu.hbm_tb_s * 1e12)
    return max(compute, memory) * 1e3
