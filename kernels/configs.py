"""Launch configurations: one pinned config per (kernel, arch, dtype), so results are
reproducible and the first call compiles once; ``PERFSUITE_AUTOTUNE=1`` sweeps
``autotune_space`` instead. Why each (docs/kernel.md, "Pinned configs"): ``perfsuite
kernel-report`` builds them all and fails on spills."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace

import torch
import triton

KERNELS = ("forward", "backward", "slices")
GROUP_N = 8  # row blocks that sweep the columns together (``common.grouped``: L2 reuse)

ARCHS = ("sm_80", "sm_90", "sm_100")
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


@dataclass(frozen=True)
class KernelConfig:
    """Tile sizes and launch options for one kernel (``block_dd``: the tile backward's D
    chunk; ``ctas_per_sm``: the occupancy that sizes a grid)."""

    block_n: int
    block_v: int
    block_d: int
    num_warps: int
    num_stages: int
    block_dd: int = 0
    ctas_per_sm: int = 1
    flatten: bool | None = None

    def meta(self, kernel: str) -> dict[str, int]:
        """The constexpr tile sizes the kernel takes (and, for the persistent TMA
        kernels, whether their tile and D loops are fused into one pipelined loop)."""
        out = {"BLOCK_N": self.block_n, "BLOCK_V": self.block_v, "BLOCK_D": self.block_d}
        if kernel == "backward":
            out["BLOCK_DD"] = self.block_dd
        if kernel.endswith("_tma"):
            out["FLATTEN"] = bool(self.flatten)
        return out

    def launch(self, kernel: str) -> dict[str, int]:
        """Keyword arguments for ``kernel[grid](...)``."""
        return {**self.meta(kernel), "num_warps": self.num_warps, "num_stages": self.num_stages}

    def describe(self) -> str:
        dd = f"x{self.block_dd}" if self.block_dd else ""
        return (
            f"N{self.block_n}-V{self.block_v}-D{self.block_d}{dd}"
            f"-w{self.num_warps}-s{self.num_stages}{'-flat' if self.flatten else ''}"
        )


# The widest tiles that compile without spills for every variant on sm_80, sm_90a and
# sm_100a (the backward is bound by L2 traffic, which falls with tile area).
_HALF_FWD = KernelConfig(128, 128, 32, num_warps=8, num_stages=3)
_HALF_BWD = KernelConfig(128, 128, 32, num_warps=8, num_stages=3, block_dd=64)
_HOPPER_FWD = KernelConfig(256, 128, 32, num_warps=8, num_stages=3)
_HOPPER_BWD = KernelConfig(128, 256, 64, num_warps=8, num_stages=3, block_dd=32)
# The H200's fastest slice tile, N256-V128-D64, spills (reports/nvidia-h200/README.md).
_HOPPER_SLICES = KernelConfig(128, 128, 64, num_warps=8, num_stages=3)
_BLACKWELL_FWD = KernelConfig(128, 128, 32, num_warps=8, num_stages=3)
_BLACKWELL_BWD = KernelConfig(128, 128, 64, num_warps=8, num_stages=3, block_dd=32)
_FP32_FWD = KernelConfig(64, 64, 32, num_warps=8, num_stages=2)
_FP32_BWD = KernelConfig(64, 64, 32, num_warps=8, num_stages=3, block_dd=32)

# (forward, backward, slices) per arch. Half precision shares tiles; fp32 runs ieee dots
# (torch's default "highest" matmul precision), which want smaller tiles.
_HALF = {
    "sm_80": (_HALF_FWD, _HALF_BWD, _HALF_FWD),
    "sm_90": (_HOPPER_FWD, _HOPPER_BWD, _HOPPER_SLICES),
    "sm_100": (_BLACKWELL_FWD, _BLACKWELL_BWD, _HOPPER_SLICES),
}
PINNED: dict[tuple[str, str, str], KernelConfig] = {
    (kernel, arch, dtype): cfg
    for arch in ARCHS
    for dtype, cfgs in (("bf16", _HALF[arch]), ("fp16", _HALF[arch]), ("fp32", None))
    for kernel, cfg in zip(KERNELS, cfgs or (_FP32_FWD, _FP32_BWD, _FP32_FWD), strict=True)
}

# The TMA path (hopper.py): persistent grids over BLOCK_D 64, on sm_90 three stages with
# the tile and D loops fused (FLATTEN); measured on an H200, spill-free under Triton 3.6
# and 3.7.1 (docs/kernel.md, "The Hopper fast path"). No Blackwell has timed sm_100's.
TMA_CONFIGS = {
    ("forward", "sm_90"): KernelConfig(256, 128, 64, num_warps=8, num_stages=3, flatten=True),
    ("slices", "sm_90"): KernelConfig(128, 256, 64, num_warps=8, num_stages=3, flatten=True),
    ("forward", "sm_100"): KernelConfig(128, 128, 64, num_warps=8, num_stages=3, flatten=True),
    ("slices", "sm_100"): KernelConfig(128, 256, 64, num_warps=8, num_stages=2, flatten=False),
}
# The class-weighted forward where its column weights do not fit beside the pinned tile.
_TMA_WEIGHTED_FORWARD = {
    "sm_90": KernelConfig(128, 128, 64, num_warps=8, num_stages=3, flatten=True),
}


def tma_config(kernel: str, arch: str, weighted: bool = False) -> KernelConfig:
    """The TMA path's pinned config for ``kernel`` on ``arch`` (``arch_of``: sm_90 or
    sm_100); ``weighted``: the forward with class weights."""
    if kernel == "forward" and weighted and arch in _TMA_WEIGHTED_FORWARD:
        return _TMA_WEIGHTED_FORWARD[arch]
    return TMA_CONFIGS[kernel, arch]


# Under the interpreter every program costs Python time: tiles as large as numpy handles
# well, shrunk to the problem (``fit``).
INTERPRETER = {
    "forward": KernelConfig(512, 2048, 256, num_warps=4, num_stages=1),
    "backward": KernelConfig(512, 1024, 256, num_warps=4, num_stages=1, block_dd=256),
    "slices": KernelConfig(512, 1024, 256, num_warps=4, num_stages=1),
}

_override: dict[str, KernelConfig] = {}


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def autotune_enabled() -> bool:
    """``PERFSUITE_AUTOTUNE=1`` turns on the sweep (never under the interpreter)."""
    return os.environ.get("PERFSUITE_AUTOTUNE", "0") == "1" and not interpreting()


def arch_of(device: torch.device) -> str:
    """``sm_100`` on datacenter Blackwell (capability 10.x), ``sm_90`` on Hopper and the
    rest from 9 on, else ``sm_80`` (the Ampere-safe tiles)."""
    major, _ = torch.cuda.get_device_capability(device)
    return "sm_100" if major == 10 else "sm_90" if major >= 9 else "sm_80"


def fit(block: int, size: int, least: int = 16) -> int:
    """``block``, shrunk to the next power of two of ``size`` (at least ``least``)."""
    return min(block, max(least, triton.next_power_of_2(size)))


def pinned_config(
    kernel: str,
    dtype: torch.dtype,
    device: torch.device,
    shape: tuple[int, int, int],
    *,
    tma: bool = False,
    weighted: bool = False,
) -> KernelConfig:
    """The config a non-autotuned launch uses for an (N, V, D) problem; ``tma``: the TMA
    path's (hopper.py; ``weighted``: the forward with class weights)."""
    if kernel in _override:
        return _override[kernel]
    if interpreting() or device.type != "cuda":
        # The TMA kernels' interpreter tiles are the slice kernel's, shrunk to the problem.
        cfg, (n, v, d) = INTERPRETER["slices" if tma else kernel], shape
        sizes = dict(block_n=n, block_v=v, block_d=d, block_dd=d)  # fit(0, d) keeps block_dd 0
        return replace(cfg, **{k: fit(getattr(cfg, k), size) for k, size in sizes.items()})
    if tma:
        return tma_config(kernel, arch_of(device), weighted)
    return PINNED[kernel, arch_of(device), DTYPE_NAMES[dtype]]


@contextlib.contextmanager
def use_config(**configs: KernelConfig) -> Iterator[None]:
    """Force configs (tests use small tiles to exercise multi-tile paths)."""
    unknown = set(configs) - set(KERNELS)
    if unknown:
        raise ValueError(f"unknown kernel(s) {sorted(unknown)}; known: {KERNELS}")
    saved = dict(_override)
    _override.update(configs)
    try:
        yield
    finally:
        _override.clear()
        _override.update(saved)


def autotune_space(kernel: str) -> list[triton.Config]:
    """Candidate configs for ``PERFSUITE_AUTOTUNE=1`` (pinned ones included)."""
    base = [c for (k, _, _), c in PINNED.items() if k == kernel]
    extra = [
        KernelConfig(bn, bv, bd, num_warps=w, num_stages=s)
        for bn, bv, bd, w, s in (
            (64, 128, 64, 4, 4),
            (128, 64, 64, 4, 4),
            (128, 256, 32, 8, 3),
            (256, 128, 32, 8, 3),
            (64, 256, 64, 8, 3),
        )
    ]
    seen: dict[str, KernelConfig] = {}
    for cfg in [*base, *extra]:
        cfg = replace(cfg, block_dd=(cfg.block_dd or 64) if kernel == "backward" else 0)
        seen.setdefault(cfg.describe(), cfg)
    return [
        triton.Config(c.meta(kernel), num_warps=c.num_warps, num_stages=c.num_stages)
        for c in seen.values()
    ]
