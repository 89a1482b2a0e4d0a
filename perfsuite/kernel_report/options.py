"""``perfsuite kernel-report``'s options and what they can name, checked before any build
and without torch or Triton: an unknown name is one ``error:`` line at once."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

from perfsuite.plan.shapes import PRESETS

from .diff import DEFAULT_THRESHOLD

# Archs with shipped configs (configs.arch_of); consumer Blackwell's (sm_120) 99 KiB of
# shared memory per CTA is too little for the Hopper tiles arch_of gives it.
SUPPORTED = ("sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a")
DTYPES = ("bf16", "fp16", "fp32")  # the dtypes a launch is built in
WORKLOADS = ("random", "synthetic")  # what ``--launched`` samples rows of


def capability(arch: str) -> int:
    if arch not in SUPPORTED:
        raise ValueError(f"unsupported arch {arch!r}: use one of {', '.join(SUPPORTED)}")
    return int(arch[3:].rstrip("a"))


def arch_set(archs: list[str]) -> list[str]:
    """``archs`` without repeats, in capability order: sm_90a,sm_80 shares sm_80,sm_90a's file."""
    return sorted(dict.fromkeys(archs), key=lambda a: (capability(a), a))


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


# The model shapes (perfsuite.plan.shapes) a report is built at by name.
SHAPES = {
    name: Shape(name, p.tokens, p.vocab, p.hidden)
    for name, p in PRESETS.items()
    if name in ("gemma2-2b", "llama3-8b")
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


def cfg_arch(arch: str) -> str:
    """The key of PINNED that ``configs.arch_of`` picks on ``arch`` (sm_90a: sm_90)."""
    cap = capability(arch)
    return "sm_100" if cap // 10 == 10 else "sm_90" if cap >= 90 else "sm_80"


# Ours (launches.py's tables: the portable and TMA kernels, then the helpers), CCE's.
KERNELS = (
    *("forward", "slices", "backward", "forward_tma", "slices_tma"),
    *("column_sum", "tile_threshold", "tile_keep", "target_logit"),
)
CCE_KERNELS = ("cce_lse_forward", "cce_backward")


def csv(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _unknown(option: str, names: list[str] | None, known: tuple[str, ...]) -> str:
    """The error for the first of ``names`` not in ``known`` ("" when all are known)."""
    bad = [n for n in names or () if n not in known]
    return f"{option} {bad[0]!r}: unknown; known: {', '.join(known)}" if bad else ""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--arch",
        default="sm_80,sm_90a",
        help=f"comma-separated targets (default: %(default)s; of {', '.join(SUPPORTED)})",
    )
    parser.add_argument(
        "--shape",
        default="gemma2-2b",
        help=f"launch shape: {', '.join(SHAPES)} or N,V,D[,dtype] (default gemma2-2b)",
    )
    parser.add_argument("--dtype", help="comma-separated dtypes (default: all)")
    parser.add_argument(
        "--kernel",
        help=f"comma-separated kernels (default: all: {', '.join(KERNELS)}, cce_*)",
    )
    parser.add_argument("--no-cce", action="store_true", help="skip CCE's kernels")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="parallel builds (default: CPUs)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--launched",
        metavar="WORKLOADS",
        help="also measure the backward tile list's launched fraction on a sample of rows "
        f"of these workloads ({', '.join(WORKLOADS)}; minutes at a real vocabulary)",
    )
    parser.add_argument(
        "--sample-rows", type=int, default=256, help="rows sampled for --launched (default 256)"
    )
    stored = parser.add_argument_group("stored baselines (docs/kernel.md)")
    stored.add_argument(
        "--save",
        metavar="DIR",
        help="also write the report's JSON document to DIR, one file per Triton version and "
        "arch set (replacing that file: a renewal)",
    )
    stored.add_argument(
        "--baseline",
        metavar="DIR",
        help="compare the builds with DIR's baseline for this Triton version and arch set; "
        "exit 1 when a build of ours gains a spill, fits fewer CTAs/SM or grows an "
        "instruction class or the total past --threshold",
    )
    stored.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD * 100,
        metavar="PCT",
        help="growth of an instruction class or the total, in percent, that fails "
        f"(default {DEFAULT_THRESHOLD * 100:g})",
    )
    stored.add_argument(
        "--across-triton",
        action="store_true",
        help="with --baseline: compare with the newest stored baseline of another Triton "
        "version (this one's when none other is stored); reports, never fails",
    )


def selection(args: argparse.Namespace) -> dict[str, Any]:
    """What the run builds, resolved (every dtype / kernel when none named); raises
    ValueError with the one-line reason for a name or value that cannot work."""
    archs = csv(args.arch)
    ordered = arch_set(archs)  # raises on an unsupported arch
    dtypes = csv(args.dtype) if args.dtype else None
    kernels = csv(args.kernel) if args.kernel else None
    workloads = csv(args.launched) if args.launched else []
    # An unknown name built nothing and passed (exit 0): a CI gate passed vacuously.
    what = _unknown("--kernel", kernels, (*KERNELS, *CCE_KERNELS))
    what = what or _unknown("--dtype", dtypes, DTYPES)
    what = what or _unknown("--launched", workloads, WORKLOADS)
    if what or args.sample_rows < 1:
        raise ValueError(what or f"--sample-rows {args.sample_rows} must be >= 1")
    if not args.threshold >= 0:  # NaN too
        raise ValueError(f"--threshold {args.threshold}: must be a percentage >= 0")
    if args.across_triton and not args.baseline:
        raise ValueError("--across-triton compares with a stored baseline: add --baseline DIR")
    with_cce = not args.no_cce
    if kernels and not with_cce and all(k in CCE_KERNELS for k in kernels):
        raise ValueError(f"--kernel {','.join(kernels)} with --no-cce builds nothing")
    return {
        "archs": ordered,
        "arch_order": archs,
        "dtypes": dtypes or list(DTYPES),
        "dtypes_asked": dtypes is not None,
        "kernels": [k for k in kernels or KERNELS if k in KERNELS],
        "peers": [k for k in kernels or CCE_KERNELS if k in CCE_KERNELS] if with_cce else [],
        "kernels_asked": kernels is not None,
        "cce": with_cce,
        "workloads": workloads,
        "sample_rows": args.sample_rows,
        "threshold": args.threshold / 100,
    }
