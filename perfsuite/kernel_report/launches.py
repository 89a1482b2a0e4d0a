"""What each kernel is launched with at a named shape: ``FakeTensor``s (pointers into one
allocation; the TMA path's ``TensorDescriptor``s over them), sizes and launch options, so
Triton's binder gives the signature, attributes and constants a real launch gets."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from unittest import mock

import torch
import triton

from perfsuite.method import DTYPES

from .options import Shape, cfg_arch

# The GPU a launch sizes its grids for, per config arch (configs.arch_of's keys): name, SMs.
GPUS = {"sm_80": ("A100", 108), "sm_90": ("H100", 132), "sm_100": ("B200", 148)}
_BASE = 1 << 24  # caching-allocator blocks are at least 512-byte aligned
TMA_ARCHS = ("sm_90", "sm_100")  # configs.arch_of keys the TMA path runs on (hopper.eligible)


class FakeTensor:
    """Enough of a tensor for Triton's binder and the kernels' heuristics (Triton skips a
    descriptor's base-alignment check for a class of this name)."""

    device = torch.device("cuda", 0)

    def __init__(self, dtype: torch.dtype | str, numel: int = 2, offset: int = 0) -> None:
        self.dtype = DTYPES.get(dtype, dtype)  # a name or a torch dtype
        self._numel, self._ptr = numel, _BASE + offset

    def data_ptr(self) -> int:
        return self._ptr

    def numel(self) -> int:
        return self._numel


T = FakeTensor  # short: the launch tables name dozens
F32 = torch.float32


@dataclass
class Launch:
    """One kernel launch to build: arguments by name; ``overrides`` replace heuristics that
    read the device (hardware atomics); ``ours``: False for CCE's (never failing a report)."""

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
    work: int | None = None  # a persistent grid's work items (tiles; row block × split)


def _pinned(kernel: str, variant: str, dtype: str, arch: str, obj: Any, args: dict, cfg: Any,
            width: int | None = None, **more: Any) -> Launch:  # fmt: skip
    """A launch of ours at its pinned config (``-W<width>``: a slice kernel's)."""
    config = cfg.describe() + ("" if width is None else f"-W{width}")
    return Launch(kernel, variant, dtype, arch, obj, args, cfg.num_warps, cfg.num_stages,
                  config=config, declared_ctas=cfg.ctas_per_sm, **more)  # fmt: skip


def persistent_grid(launch: Launch, measured_ctas: int) -> dict[str, Any]:
    """A persistent launch's grid as ``kernels.hopper._launch`` sizes it on the GPU, its
    waves (grid ÷ resident slots) and work per program; {} without ``work`` or a CTA."""
    if launch.work is None or not measured_ctas:
        return {}
    slots = GPUS[cfg_arch(launch.arch)][1] * measured_ctas
    grid = max(1, min(launch.work, slots))
    return {"grid": grid, "waves": grid / slots, "work_per_cta": launch.work / grid}


def flags(variant: str, names: str) -> tuple[bool, ...]:
    """Which of the space-separated ``names`` a variant's name holds (``smooth+softcap``: both)."""
    return tuple(name in variant.split("+") for name in names.split())


def native_atomics(dtype: str, arch: str) -> bool:
    """``backward.native_atomics`` for a buffer of ``dtype`` on ``arch`` (no device needed)."""
    return dtype == "fp32" or cfg_arch(arch) != "sm_80"


def forward_grid(shape: Shape, arch: str, cfg: Any) -> tuple[int, int, int]:
    """(splits, split size, programs) of a forward with ``cfg`` at ``shape`` on ``arch``'s
    GPU: the launcher splits V so that SMs × the config's CTAs/SM are busy."""
    from perfsuite.kernels import forward

    slots = GPUS[cfg_arch(arch)][1] * cfg.ctas_per_sm
    splits = forward.splits_for(shape.n, shape.v, cfg.block_n, slots)
    grain = max(forward.SPLIT_GRAIN, cfg.block_v)
    split_size = triton.cdiv(triton.cdiv(shape.v, splits), grain) * grain
    return splits, split_size, triton.cdiv(shape.n, cfg.block_n) * splits


def _desc(dtype: str, rows: int, cols: int, stride: int, block: list[int]) -> Any:
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor(T(dtype, rows * stride), [rows, cols], [stride, 1], block)


def _operands(shape: Shape, dtype: str, cfg: Any = None) -> dict[str, Any]:
    """E (N, D) and C (V, D), row-major: pointers and strides, or with ``cfg`` TMA
    descriptors over its (BLOCK_N | BLOCK_V, BLOCK_D) tiles."""
    n, v, d = shape.n, shape.v, shape.d
    if cfg is None:
        return dict(E=T(dtype), C=T(dtype), stride_en=d, stride_ed=1, stride_cv=d, stride_cd=1)
    e_desc = _desc(dtype, n, d, d, [cfg.block_n, cfg.block_d])
    return {"e_desc": e_desc, "c_desc": _desc(dtype, v, d, d, [cfg.block_v, cfg.block_d])}


def _shipped(kernel: str, dtype: str, arch: str, tma: bool) -> bool:
    """Whether the (portable or TMA) kernel has a config for ``dtype`` on ``arch``."""
    from perfsuite.kernels.configs import PINNED

    if tma:
        return cfg_arch(arch) in TMA_ARCHS and dtype != "fp32"
    return (kernel, cfg_arch(arch), dtype) in PINNED


# The default (slice backward, no filter): β = 0 / β > 0 × softcap off / on; class
# weights reach the kernels only with smoothing (its weighted sum; without it they are
# folded into the per-row coefficients, and the build is the plain one).
VARIANTS = ("plain", "softcap", "smooth", "smooth+softcap", "smooth+weight")
VARIANTS += ("smooth+softcap+weight",)


def _forward(shape: Shape, dtype: str, arch: str, tma: bool = False) -> Iterator[Launch]:
    """The forward (portable or TMA); the portable one's filtered tile-backward
    ablations add the tile LSEs (list) or the logit sums (sorted)."""
    from perfsuite.kernels import forward, hopper
    from perfsuite.kernels.configs import PINNED, tma_config

    if not _shipped("forward", dtype, arch, tma):
        return
    n, v, d = shape.n, shape.v, shape.d
    for name in VARIANTS if tma else (*VARIANTS, "list+smooth+softcap", "sorted"):
        smooth, cap, weighted, tiles, avg = flags(name, "smooth softcap weight list sorted")
        key = cfg_arch(arch)
        cfg = tma_config("forward", key, weighted) if tma else PINNED["forward", key, dtype]
        splits, split_size, programs = forward_grid(shape, arch, cfg)
        part = splits * n * 4  # bytes per slice of the (2|3, splits, N) fp32 buffer
        args = dict(N=n, V=v, D=d, split_size=split_size, MaxPart=T(F32))
        args |= {
            "SumPart": T(F32, offset=part),
            # c̄: smoothing without softcap (the forward's Σz), or any smoothing on the
            # tile backward's path (its rank-one part; function.py).
            "CBar": T(F32) if smooth and (not cap or tiles) else None,
            "SmoothPart": T(F32, offset=2 * part) if smooth else None,
            "Weight": T(F32) if weighted else None,  # fp32 (V,)
            "softcap": shape.softcap if cap else None,
        }
        if tma:
            args |= _operands(shape, dtype, cfg) | cfg.meta("forward_tma") | {"num_splits": splits}
            yield _pinned("forward_tma", name, dtype, arch, hopper._forward, args, cfg,
                          work=programs)  # fmt: skip
            continue
        args |= _operands(shape, dtype) | cfg.meta("forward") | {"inv_n": 1.0 / n}
        args |= {
            "LogitAvg": T(F32) if avg else None,
            "TileLSE": T(torch.bfloat16) if tiles else None,
            "num_tiles": triton.cdiv(v, cfg.block_v) if tiles else 0,
        }
        yield _pinned("forward", name, dtype, arch, forward._forward, args, cfg)


def slice_width(shape: Shape, dtype: str) -> int:
    """Columns per slice on a GPU at ``shape`` under the default budget (slices.py)."""
    from perfsuite.kernels import slices

    # The probe needs a GPU; on one it finds cuBLAS's fp32-output GEMM (torch ≥ 2.8).
    with mock.patch.object(slices, "_fp32_out_mm", lambda device: True):
        per = slices.bytes_per_column(shape.n, shape.d, DTYPES[dtype], T.device, "triton", False)
    return slices.slice_width(shape.v, per, slices.DEFAULT_BUDGET)


def slice_starts(shape: Shape, width: int) -> list[tuple[str, int, int]]:
    """(suffix, v0, columns) of each distinct specialisation among the shape's slices:
    Triton specialises an int on == 1 (a constant) and on divisibility by 16."""
    starts = range(0, shape.v, width)
    out: dict[tuple[bool, ...], tuple[str, int, int]] = {}
    for i, v0 in enumerate(starts):
        cols = min(width, shape.v - v0)
        suffix = "" if i == 0 else "+last" if i == len(starts) - 1 else f"+{i}"
        out.setdefault((v0 == 1, v0 % 16 == 0, cols == 1, cols % 16 == 0), (suffix, v0, cols))
    return list(out.values())


def _slices(shape: Shape, dtype: str, arch: str, tma: bool = False) -> Iterator[Launch]:
    """The default backward's gradient-slice GEMM (portable or TMA): every variant × each
    distinct slice, writing ``buf[:, :cols]`` of an (N, width) buffer."""
    from perfsuite.kernels import hopper, slices
    from perfsuite.kernels.configs import PINNED, tma_config

    if not _shipped("slices", dtype, arch, tma):
        return
    cfg = tma_config("slices", cfg_arch(arch)) if tma else PINNED["slices", cfg_arch(arch), dtype]
    n, d = shape.n, shape.d
    width = slice_width(shape, dtype)
    for name in VARIANTS:
        smooth, cap, weighted = flags(name, "smooth softcap weight")
        for suffix, v0, cols in slice_starts(shape, width):
            # terms.Coefficients: A, B and (β > 0) S; the class weights, fp32 (V,).
            args = dict(RowMax=T(F32), LogSum=T(F32), A=T(F32), B=T(F32), InvScale=T(F32, 1))
            args |= dict(Targets=T(torch.int64), N=n, D=d, v0=v0, width=cols)  # the caller's int64
            args |= {
                "S": T(F32) if smooth else None,
                "Weight": T(F32) if weighted else None,
                "softcap": shape.softcap if cap else None,
            }
            if tma:
                sub = cfg.block_v // hopper.slice_subtiles(weighted)
                args |= _operands(shape, dtype, cfg) | cfg.meta("slices_tma")
                args["out_desc"] = _desc(dtype, n, cols, width, [cfg.block_n, sub])
                tiles = triton.cdiv(n, cfg.block_n) * triton.cdiv(cols, cfg.block_v)
                yield _pinned("slices_tma", name + suffix, dtype, arch, hopper._grad_slice,
                              args, cfg, width, work=tiles)  # fmt: skip
                continue
            args |= {**_operands(shape, dtype), "Out": T(dtype, n * width), "stride_on": width}
            args |= cfg.meta("slices")
            yield _pinned("slices", name + suffix, dtype, arch, slices._grad_slice, args, cfg,
                          width)  # fmt: skip


def _backward(shape: Shape, dtype: str, arch: str) -> Iterator[Launch]:
    """backward="tiles" (an ablation since the slice backward): β = 0 / β > 0 × softcap
    off / on without filtering (ours-tiles), the tile list and CCE's element filter
    (+ sorting); fp32-accum: the list with smoothing and softcap, dC in fp32."""
    from perfsuite.kernels import backward
    from perfsuite.kernels.configs import PINNED

    if not _shipped("backward", dtype, arch, False):
        return
    cfg = PINNED["backward", cfg_arch(arch), dtype]
    n, v, d = shape.n, shape.v, shape.d
    de_locks_bytes = triton.cdiv(n, backward._MIN_BLOCK) * triton.cdiv(d, backward._MIN_BLOCK) * 4
    pairs = triton.cdiv(n, cfg.block_n) * triton.cdiv(v, cfg.block_v)
    variants = ("plain", "softcap", "smooth", "smooth+softcap", "list", "list+smooth+softcap")
    variants += ("filter+sorted",) + (("fp32-accum",) if dtype != "fp32" else ())
    for name in variants:
        parts = "list+smooth+softcap+accum" if name == "fp32-accum" else name
        smooth, cap, use_list, filt, accum = flags(parts, "smooth softcap list filter accum")
        dc_dtype = "fp32" if accum else dtype
        args = dict(_operands(shape, dtype), RowMax=T(F32), LogSum=T(F32), G=T(F32), dE=T(F32))
        args |= dict(dC=T(dc_dtype), dELocks=T(torch.int32), N=n, V=v, D=d, **cfg.meta("backward"))
        args |= {
            "Order": T(torch.int32) if filt else None,
            "TileList": T(torch.int32, pairs + 1) if use_list else None,
            "TileCount": T(torch.int32, 1) if use_list else None,
            "dCLocks": T(torch.int32, offset=de_locks_bytes),
            "softcap": shape.softcap if cap else None,
            "smooth_w": shape.beta / v if smooth else 0.0,
            "RowEps": T(F32) if filt else None,
        }
        overrides = {
            "DE_ATOMIC": native_atomics("fp32", arch),  # dE is always an fp32 buffer
            "DC_ATOMIC": native_atomics(dc_dtype, arch),
        }
        yield _pinned("backward", name, dtype, arch, backward._backward, args, cfg,
                      overrides=overrides)  # fmt: skip


def _helpers(shape: Shape, dtype: str, arch: str) -> Iterator[Launch]:
    """The small kernels around the main two: column sums, tile threshold and keep, target logit."""
    from perfsuite.kernels import reductions, targets, tiles
    from perfsuite.kernels.configs import PINNED

    n, v, d = shape.n, shape.v, shape.d
    sms = GPUS[cfg_arch(arch)][1]
    d_blocks = triton.cdiv(d, reductions.BLOCK_D)
    for name, rows, weights in (("sum", v, False), ("weighted", n, True)):
        splits = max(1, min(triton.cdiv(rows, reductions.BLOCK_R), triton.cdiv(4 * sms, d_blocks)))
        per = triton.cdiv(triton.cdiv(rows, splits), reductions.BLOCK_R) * reductions.BLOCK_R
        args = {"X": T(dtype), "W": T(F32) if weights else None, "Out": T(F32), "R": rows}
        args |= dict(D=d, rows_per_split=per, stride_xr=d, stride_xd=1)
        args |= dict(BLOCK_R=reductions.BLOCK_R, BLOCK_D=reductions.BLOCK_D)
        config = f"R{reductions.BLOCK_R}-D{reductions.BLOCK_D}-w{reductions.NUM_WARPS}"
        yield Launch("column_sum", name, dtype, arch, reductions._column_sum_kernel, args,
                     reductions.NUM_WARPS, config=config)  # fmt: skip
    fwd = PINNED["forward", cfg_arch(arch), dtype]
    bwd = PINNED["backward", cfg_arch(arch), dtype]
    common = dict(TileLSE=T(torch.bfloat16), RowMax=T(F32), LogSum=T(F32), Tau=T(F32), N=n)
    common |= dict(num_f=triton.cdiv(v, fwd.block_v), extra=0.0, BLOCK_T=tiles.BLOCK_T)
    threshold = dict(common, filter_eps=1e-3, budget=1e-3, LEVELS=tiles.LEVELS, BLOCK_N=32)
    yield Launch("tile_threshold", "-", dtype, arch, tiles._threshold_kernel, threshold, 4,
                 config=f"N{threshold['BLOCK_N']}-T{tiles.BLOCK_T}-w4")  # fmt: skip
    keep = {**common, "G": T(F32), "Keep": T(torch.int8), "num_v": triton.cdiv(v, bwd.block_v)}
    keep |= {"BLOCK_N": bwd.block_n, "BLOCK_V": bwd.block_v, "TILE_W": fwd.block_v}
    yield Launch("tile_keep", "-", dtype, arch, tiles._keep_kernel, keep, 4,
                 config=f"N{bwd.block_n}-V{bwd.block_v}-W{fwd.block_v}-w4")  # fmt: skip
    for name, cap in (("plain", None), ("softcap", shape.softcap or 30.0)):
        args = dict(_operands(shape, dtype), Targets=T(torch.int64), Out=T(F32), softcap=cap)
        args |= dict(N=n, V=v, D=d, stride_t=1, BLOCK_N=targets.BLOCK_N, BLOCK_D=targets.BLOCK_D)
        yield Launch("target_logit", name, dtype, arch, targets._target_logit_kernel, args, 4,
                     config=f"N{targets.BLOCK_N}-D{targets.BLOCK_D}-w4")  # fmt: skip


# Ours (portable, then the TMA path on sm_90a / sm_100a), then CCE's: a report's order.
TABLES = (
    (_forward, _slices, _backward, _helpers),
    (partial(_forward, tma=True), partial(_slices, tma=True)),
)
