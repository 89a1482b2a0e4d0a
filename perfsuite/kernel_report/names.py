"""What a kernel report can be asked for, by name (archs, shapes, dtypes, ``--launched``
workloads), and the checks of those names: no torch, no Triton, so that
``perfsuite kernel-report`` refuses a bad argument at once (issue 46)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Archs with shipped configs (configs.arch_of: Ampere-class, Hopper and datacenter
# Blackwell tiles). Consumer Blackwell (sm_120) is left out: arch_of gives it Hopper's
# tiles, and the tile backward's 145 KiB of shared memory exceeds its 99 KiB per CTA.
SUPPORTED = ("sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a")
# The dtypes a launch is built in, with torch's name of each (``launches.DTYPES``).
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# What ``--launched`` samples rows of, and how many rows by default.
WORKLOADS = ("random", "synthetic")
DEFAULT_ROWS = 256


def capability(arch: str) -> int:
    if arch not in SUPPORTED:
        raise ValueError(f"unsupported arch {arch!r}: use one of {', '.join(SUPPORTED)}")
    return int(re.fullmatch(r"sm_(\d+)a?", arch).group(1))


def arch_set(archs: list[str]) -> list[str]:
    """``archs`` without repeats, in capability order: ``sm_90a,sm_80`` and
    ``sm_80,sm_90a`` share a file."""
    return sorted(set(archs), key=lambda a: (capability(a), a))


@dataclass(frozen=True)
class Shape:
    """A problem size: N rows, V vocab, D hidden, in one dtype; smoothing / softcap values."""

    name: str
    n: int
    v: int
    d: int
    dtype: str = "bf16"
    beta: float = 0.1
    softcap: float = 30.0


SHAPES = {
    "gemma2-2b": Shape("gemma2-2b", 8192, 256000, 2304),
    "llama3-8b": Shape("llama3-8b", 8192, 128256, 4096),
}


def parse_shape(text: str) -> Shape:
    """A preset name (``gemma2-2b``) or ``N,V,D[,dtype]``."""
    if text in SHAPES:
        return SHAPES[text]
    parts = [p.strip() for p in text.split(",")]
    try:
        n, v, d = (int(p) for p in parts[:3])
    except ValueError:
        raise ValueError(f"bad shape {text!r}: use {sorted(SHAPES)} or N,V,D[,dtype]") from None
    dtype = parts[3] if len(parts) > 3 else "bf16"
    if dtype not in DTYPES or len(parts) > 4:
        raise ValueError(f"bad shape {text!r}: dtype must be one of {sorted(DTYPES)}")
    return Shape(f"N{n}-V{v}-D{d}", n, v, d, dtype)
