"""Analytic time: FLOPs and bytes per phase (math.md) against a GPU's datasheet peaks.

FLOPs (math.md, "Compute lower bound"): the forward is one N×V×D matmul,
2·N·V·D; a backward that does not store the logits recomputes them and forms
dE and dC, 6·N·V·D; forward+backward 8·N·V·D. Bytes: the inputs read once per
pass, the per-token losses and the gradients written. The roofline time is the
larger of FLOPs / peak and bytes / bandwidth; a measured time's *fraction of
roofline* is roofline / measured (1 = at the datasheet limit). Unfiltered: a
kernel that skips gradient blocks can beat it, which is the point.
"""

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
    memory_gb: float


# Datasheet figures. NVIDIA quotes tensor-core numbers "with sparsity"; the
# dense figures below are half of those.
# - H100 SXM5 / PCIe / NVL: NVIDIA H100 Tensor Core GPU datasheet (2023):
#   SXM BF16/FP16 1,979 TFLOPS sparse → 989.5 dense, FP32 67, 3.35 TB/s, 80 GB;
#   PCIe 1,513 → 756.5, FP32 51, 2.0 TB/s, 80 GB; NVL 1,671 → 835.5, FP32 60,
#   3.9 TB/s, 94 GB.
# - H200 SXM / NVL: NVIDIA H200 Tensor Core GPU datasheet (2024): SXM BF16/FP16
#   1,979 → 989.5 dense, FP32 67, 4.8 TB/s, 141 GB; NVL 1,671 → 835.5, FP32 60,
#   4.8 TB/s, 141 GB.
# - A100: NVIDIA A100 Tensor Core GPU datasheet (2021): BF16/FP16 312 dense
#   (624 sparse), FP32 19.5; 80 GB SXM 2,039 GB/s, 80 GB PCIe 1,935 GB/s,
#   40 GB 1,555 GB/s.
GPUS: dict[str, GPU] = {
    g.name: g
    for g in (
        GPU("H100 SXM", {"bf16": 989.5, "fp16": 989.5, "fp32": 67.0}, 3.35, 80),
        GPU("H100 PCIe", {"bf16": 756.5, "fp16": 756.5, "fp32": 51.0}, 2.0, 80),
        GPU("H100 NVL", {"bf16": 835.5, "fp16": 835.5, "fp32": 60.0}, 3.9, 94),
        GPU("H200 SXM", {"bf16": 989.5, "fp16": 989.5, "fp32": 67.0}, 4.8, 141),
        GPU("H200 NVL", {"bf16": 835.5, "fp16": 835.5, "fp32": 60.0}, 4.8, 141),
        GPU("A100 SXM 80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 2.039, 80),
        GPU("A100 PCIe 80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 1.935, 80),
        GPU("A100 40GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 1.555, 40),
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
        if "NVL" in text:
            return GPUS["H100 NVL"]
        return GPUS["H100 PCIe" if "PCIE" in text else "H100 SXM"]
    if "A100" in text:
        if "80GB" in text.replace(" ", ""):
            return GPUS["A100 PCIe 80GB" if "PCIE" in text else "A100 SXM 80GB"]
        return GPUS["A100 40GB"]
    return None


def gpu_for_env(env: dict[str, Any]) -> GPU | None:
    """The known GPU a results file was measured on, or None (CPU, unknown GPU)."""
    device = env.get("device") or {}
    if device.get("kind") != "cuda":
        return None
    return identify_gpu(device.get("name"))


def phase_flops(phase: str, tokens: int, vocab: int, hidden: int) -> float:
    return FLOP_FACTOR[phase] * tokens * vocab * hidden


def phase_bytes(phase: str, tokens: int, vocab: int, hidden: int, dtype: str) -> float:
    """Minimal HBM traffic: e and c read per pass, fp32 losses and dE, dC written."""
    inputs = (tokens + vocab) * hidden * DTYPE_BYTES[dtype]
    losses = tokens * 4
    return {
        "fwd": inputs + losses,
        "bwd": 2 * inputs,
        "fwd+bwd": 3 * inputs + losses,
    }[phase]


def roofline_ms(phase: str, tokens: int, vocab: int, hidden: int, dtype: str, gpu: GPU) -> float:
    compute = phase_flops(phase, tokens, vocab, hidden) / (gpu.tflops[dtype] * 1e12)
    memory = phase_bytes(phase, tokens, vocab, hidden, dtype) / (gpu.hbm_tb_s * 1e12)
    return max(compute, memory) * 1e3
