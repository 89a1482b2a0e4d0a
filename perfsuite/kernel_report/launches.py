"""What each kernel is launched with at a named shape: fake tensors, sizes, launch options.

Each ``Launch`` lists, by name, the arguments its launcher passes; tensors are
``FakeTensor``s whose data pointers mirror slices of one allocation, so Triton's binder
gives the divisibility attributes and constants a real launch gets (``build.specialise``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import triton

from .names import DTYPES as DTYPE_NAMES
from .names import SHAPES as SHAPES  # named in names.py (no torch), used from here too
from .names import Shape as Shape
from .names import parse_shape as parse_shape

# Representative GPU per config arch (configs.arch_of's keys): (name, SM count). A launch
# sizes its grids by the SM count (forward splits, column-sum splits).
GPUS = {"sm_80": ("A100", 108), "sm_90": ("H100", 132), "sm_100": ("B200", 148)}
DTYPES = {name: getattr(torch, torch_name) for name, torch_name in DTYPE_NAMES.items()}
_BASE = 1 << 24  # caching-allocator blocks are at least 512-byte aligned


class FakeTensor:
    """Enough of a tensor for Triton's binder and the kernels' heuristics."""

    def __init__(self, dtype: torch.dtype | str, numel: int = 2, offset: int = 0) -> None:
        self.dtype = DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype
        self.device = torch.device("cuda", 0)
        self._numel = numel
        self._ptr = _BASE + offset

    def data_ptr(self) -> int:
        return self._ptr

    def numel(self) -> int:
        return self._numel


T = FakeTensor  # short: the launch tables name dozens


@dataclass
class Launch:
    """One kernel launch to build: arguments by name plus explicit constexpr overrides.

    ``overrides`` replace heuristics that depend on the device (hardware atomics);
    ``ours`` is False for baselines (reported side by side, never failing the report).
    """

    kernel: str
    variant: str
    dtype: str
    arch: str
    obj: Any
    args: dict[str, Any]
    num_warps: int
    num_stages: int = 3
    overrides: dict[str, Any] = field(default_factory=dict)
    config: str = ""
    declared_ctas: int | None = None
    ours: bool = True
    # Work items of a persistent grid (tiles or (row block, split) items): its grid is
    # min(work, SMs × declared CTAs/SM), and the report gives its waves.
    work: int | None = None


def persistent_grid(launch: Launch, measured_ctas: int) -> dict[str, Any]:
    """A persistent launch's grid on the representative GPU as its launcher sizes it
    (``kernels.hopper._launch``: SMs × the build's CTAs/SM, fewer when there is less
    work), its waves (grid ÷ resident slots; 1.0: every slot busy) and its work items per
    program; {} for a launch without ``work`` or a build that fits no CTA."""
    if launch.work is None or not measured_ctas:
        return {}
    slots = GPUS[cfg_arch(launch.arch)][1] * measured_ctas
    grid = max(1, min(launch.work, slots))
    return {"grid": grid, "waves": grid / slots, "work_per_cta": launch.work / grid}


def flags(variant: str, *names: str) -> tuple[bool, ...]:
    """Which of ``names`` a variant's name holds (``smooth+softcap``: both)."""
    parts = variant.split("+")
    return tuple(name in parts for name in names)


def cfg_arch(arch: str) -> str:
    """``sm_90a`` -> ``sm_90``, ``sm_100a`` -> ``sm_100``: the key of PINNED that
    ``configs.arch_of`` picks on that GPU."""
    cap = int(arch[3:].rstrip("a"))
    return "sm_100" if cap // 10 == 10 else "sm_90" if cap >= 90 else "sm_80"


def _forward(shape: Shape, dtype: str, arch: str) -> Iterator[Launch]:
    from perfsuite.kernels import forward
    from perfsuite.kernels.configs import PINNED

    n, v, d = shape.n, shape.v, shape.d
    # The default (slice backward, no filter): β = 0 / β > 0 × softcap off / on; class
    # weights reach the kernel only with smoothing (its weighted sum). The filtered
    # tile-backward ablations add the tile LSEs (list) or the logit sums (sorted).
    variants = ("plain", "softcap", "smooth", "smooth+softcap", "smooth+weight")
    variants += ("smooth+softcap+weight", "list+smooth+softcap", "sorted")
    for name in variants:
        smooth, cap, avg, tiles, weighted = flags(
            name, "smooth", "softcap", "sorted", "list", "weight"
        )
        cfg = PINNED["forward", cfg_arch(arch), dtype]
        slots = GPUS[cfg_arch(arch)][1] * cfg.ctas_per_sm
        splits = forward.splits_for(n, v, cfg.block_n, slots)
        grain = max(forward.SPLIT_GRAIN, cfg.block_v)
        split_size = triton.cdiv(triton.cdiv(v, splits), grain) * grain
        num_tiles = triton.cdiv(v, cfg.block_v) if tiles else 0
        part = splits * n * 4  # bytes per slice of the (2|3, splits, N) fp32 buffer
        args = {
            "E": T(dtype),
            "C": T(dtype),
            # c̄: smoothing without softcap (the forward's Σz), or any smoothing on the
            # tile backward's path (its rank-one part; function.py).
            "CBar": T(torch.float32) if smooth and (not cap or tiles) else None,
            "MaxPart": T(torch.float32, offset=0),
            "SumPart": T(torch.float32, offset=part),
            "SmoothPart": T(torch.float32, offset=2 * part) if smooth else None,
            "LogitAvg": T(torch.float32) if avg else None,
            "TileLSE": T(torch.bfloat16) if tiles else None,
            "Weight": T(torch.float32) if weighted else None,  # fp32 (V,)
            "softcap": shape.softcap if cap else None,
            "inv_n": 1.0 / n,
            "N": n,
            "V": v,
            "D": d,
            "split_size": split_size,
            "num_tiles": num_tiles,
            **_strides(d),
            **cfg.meta("forward"),
        }
        yield Launch(
            "forward", name, dtype, arch, forward._forward, args, cfg.num_warps,
            cfg.num_stages, config=cfg.describe(), declared_ctas=cfg.ctas_per_sm,
        )  # fmt: skip


def _strides(d: int) -> dict[str, int]:
    return {"stride_en": d, "stride_ed": 1, "stride_cv": d, "stride_cd": 1}


def backward_inputs(dtype: str) -> dict[str, FakeTensor]:
    """E, C and the per-row statistics both backward kernels read (fp32 max, log-sum, g)."""
    stats = {name: T(torch.float32) for name in ("RowMax", "LogSum", "G")}
    return {"E": T(dtype), "C": T(dtype), **stats}


def native_atomics(dtype: str, arch: str) -> bool:
    """``backward.native_atomics`` for a buffer of ``dtype`` on ``arch`` (no device needed)."""
    return dtype == "fp32" or cfg_arch(arch) != "sm_80"


def _backward(shape: Shape, dtype: str, arch: str) -> Iterator[Launch]:
    from perfsuite.kernels import backward
    from perfsuite.kernels.configs import PINNED

    cfg = PINNED["backward", cfg_arch(arch), dtype]
    n, v, d = shape.n, shape.v, shape.d
    min_block = getattr(backward, "_MIN_BLOCK", 16)
    de_locks_bytes = triton.cdiv(n, min_block) * triton.cdiv(d, min_block) * 4
    pairs = triton.cdiv(n, cfg.block_n) * triton.cdiv(v, cfg.block_v)
    # backward="tiles" (an ablation since the slice backward): β = 0 / β > 0 × softcap
    # off / on without filtering (ours-tiles), the tile list and CCE's element filter
    # (+ sorting); fp32-accum: the list with smoothing and softcap, dC in fp32.
    variants = ("plain", "softcap", "smooth", "smooth+softcap", "list", "list+smooth+softcap")
    variants += ("filter+sorted",) + (("fp32-accum",) if dtype != "fp32" else ())
    for name in variants:
        parts = "list+smooth+softcap+accum" if name == "fp32-accum" else name
        smooth, cap, use_list, filt, accum = flags(
            parts, "smooth", "softcap", "list", "filter", "accum"
        )
        dc_dtype = "fp32" if accum else dtype
        args = {
            **backward_inputs(dtype),
            "Order": T(torch.int32) if filt else None,
            "TileList": T(torch.int32, pairs + 1) if use_list else None,
            "TileCount": T(torch.int32, 1) if use_list else None,
            "dE": T(torch.float32),
            "dC": T(dc_dtype),
            "dELocks": T(torch.int32),
            "dCLocks": T(torch.int32, offset=de_locks_bytes),
            "softcap": shape.softcap if cap else None,
            "smooth_w": shape.beta / v if smooth else 0.0,
            "RowEps": T(torch.float32) if filt else None,
            "N": n,
            "V": v,
            "D": d,
            **_strides(d),
            **cfg.meta("backward"),
        }
        overrides = {
            "DE_ATOMIC": native_atomics("fp32", arch),  # dE is always an fp32 buffer
            "DC_ATOMIC": native_atomics(dc_dtype, arch),
        }
        yield Launch(
            "backward", name, dtype, arch, backward._backward, args, cfg.num_warps,
            cfg.num_stages, overrides, cfg.describe(), cfg.ctas_per_sm,
        )  # fmt: skip


def _helpers(shape: Shape, dtype: str, arch: str) -> Iterator[Launch]:
    """The small kernels around the main two: column sums, tile threshold and keep, the
    target logit."""
    from perfsuite.kernels import reductions, targets, tiles
    from perfsuite.kernels.configs import PINNED

    n, v, d = shape.n, shape.v, shape.d
    sms = GPUS[cfg_arch(arch)][1]
    d_blocks = triton.cdiv(d, reductions.BLOCK_D)
    for name, rows, weights in (("sum", v, False), ("weighted", n, True)):
        splits = max(1, min(triton.cdiv(rows, reductions.BLOCK_R), triton.cdiv(4 * sms, d_blocks)))
        per = triton.cdiv(triton.cdiv(rows, splits), reductions.BLOCK_R) * reductions.BLOCK_R
        args = {
            "X": T(dtype),
            "W": T(torch.float32) if weights else None,
            "Out": T(torch.float32),
            "R": rows,
            "D": d,
            "rows_per_split": per,
            "stride_xr": d,
            "stride_xd": 1,
            "BLOCK_R": reductions.BLOCK_R,
            "BLOCK_D": reductions.BLOCK_D,
        }
        yield Launch(
            "column_sum", name, dtype, arch, reductions._column_sum_kernel, args,
            reductions.NUM_WARPS,
            config=f"R{reductions.BLOCK_R}-D{reductions.BLOCK_D}-w{reductions.NUM_WARPS}",
        )  # fmt: skip
    fwd = PINNED["forward", cfg_arch(arch), dtype]
    bwd = PINNED["backward", cfg_arch(arch), dtype]
    num_f = triton.cdiv(v, fwd.block_v)
    common = {
        "TileLSE": T(torch.bfloat16),
        "RowMax": T(torch.float32),
        "LogSum": T(torch.float32),
        "N": n,
        "num_f": num_f,
        "extra": 0.0,
        "BLOCK_T": tiles.BLOCK_T,
    }
    block_n = 32
    threshold = {
        **common,
        "Tau": T(torch.float32),
        "filter_eps": 1e-3,
        "budget": 1e-3,
        "LEVELS": tiles.LEVELS,
        "BLOCK_N": block_n,
    }
    yield Launch(
        "tile_threshold", "-", dtype, arch, tiles._threshold_kernel, threshold, 4,
        config=f"N{block_n}-T{tiles.BLOCK_T}-w4",
    )  # fmt: skip
    keep = {
        **common,
        "G": T(torch.float32),
        "Tau": T(torch.float32),
        "Keep": T(torch.int8),
        "num_v": triton.cdiv(v, bwd.block_v),
        "BLOCK_N": bwd.block_n,
        "BLOCK_V": bwd.block_v,
        "TILE_W": fwd.block_v,
    }
    yield Launch(
        "tile_keep", "-", dtype, arch, tiles._keep_kernel, keep, 4,
        config=f"N{bwd.block_n}-V{bwd.block_v}-W{fwd.block_v}-w4",
    )  # fmt: skip
    for name, cap in (("plain", None), ("softcap", shape.softcap or 30.0)):
        args = {
            "E": T(dtype),
            "C": T(dtype),
            "Targets": T(torch.int64),
            "Out": T(torch.float32),
            "softcap": cap,
            "N": n,
            "V": v,
            "D": d,
            **_strides(d),
            "stride_t": 1,
            "BLOCK_N": targets.BLOCK_N,
            "BLOCK_D": targets.BLOCK_D,
        }
        yield Launch(
            "target_logit", name, dtype, arch, targets._target_logit_kernel, args, 4,
            config=f"N{targets.BLOCK_N}-D{targets.BLOCK_D}-w4",
        )  # fmt: skip
