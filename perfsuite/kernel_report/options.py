"""``perfsuite kernel-report``'s options, and the selection they name (checked before any
build: an unknown name is one ``error:`` line, never a report that built nothing; checked
without torch or Triton, from ``names``)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from . import names
from .diff import DEFAULT_THRESHOLD

DEFAULT_ARCHS = ("sm_80", "sm_90a")
# Ours: slice_launches' and tma_launches' (Hopper's TMA), then launches' helpers.
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
        default=",".join(DEFAULT_ARCHS),
        help=f"comma-separated targets (default: sm_80,sm_90a; of {', '.join(names.SUPPORTED)})",
    )
    parser.add_argument(
        "--shape",
        default="gemma2-2b",
        help=f"launch shape: {', '.join(names.SHAPES)} or N,V,D[,dtype] (default gemma2-2b)",
    )
    parser.add_argument("--dtype", default=None, help="comma-separated dtypes (default: all)")
    parser.add_argument(
        "--kernel",
        default=None,
        help=f"comma-separated kernels (default: all: {', '.join(KERNELS)}, cce_*)",
    )
    parser.add_argument("--no-cce", action="store_true", help="skip CCE's kernels")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="parallel builds (default: CPUs)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--launched",
        default=None,
        metavar="WORKLOADS",
        help="also measure the backward tile list's launched fraction on a sample of rows "
        f"of these workloads ({', '.join(names.WORKLOADS)}; minutes at a real vocabulary)",
    )
    parser.add_argument(
        "--sample-rows",
        type=int,
        default=names.DEFAULT_ROWS,
        help=f"rows sampled for --launched (default {names.DEFAULT_ROWS})",
    )
    stored = parser.add_argument_group("stored baselines (docs/kernel.md)")
    stored.add_argument(
        "--save",
        default=None,
        metavar="DIR",
        help="also write the report's JSON document to DIR, one file per Triton version and "
        "arch set (replacing that file: a renewal)",
    )
    stored.add_argument(
        "--baseline",
        default=None,
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
    for arch in archs:
        names.capability(arch)
    dtypes = csv(args.dtype) if args.dtype else None
    kernels = csv(args.kernel) if args.kernel else None
    workloads = csv(args.launched) if args.launched else []
    # An unknown name built nothing and passed (exit 0): a CI gate passed vacuously.
    what = _unknown("--kernel", kernels, (*KERNELS, *CCE_KERNELS))
    what = what or _unknown("--dtype", dtypes, tuple(names.DTYPES))
    what = what or _unknown("--launched", workloads, tuple(names.WORKLOADS))
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
        "archs": names.arch_set(archs),
        "arch_order": archs,
        "dtypes": dtypes or list(names.DTYPES),
        "dtypes_asked": dtypes is not None,
        "kernels": [k for k in kernels or KERNELS if k in KERNELS],
        "peers": [k for k in kernels or CCE_KERNELS if k in CCE_KERNELS] if with_cce else [],
        "kernels_asked": kernels is not None,
        "cce": with_cce,
        "workloads": workloads,
        "sample_rows": args.sample_rows,
        "threshold": args.threshold / 100,
    }
