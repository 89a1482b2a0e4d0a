"""The TMA fast path's kernels (``kernels/hopper.py``) as launched on sm_90 and sm_100.

Tensor-descriptor arguments are host ``TensorDescriptor``s over fake tensors (Triton
skips its base-alignment check for a class named ``FakeTensor``), so the binder gives
the ``tensordesc<…>`` signature a real launch gets. The persistent grid is one wave of
the representative GPU (``launches.GPUS``); ``waves`` in the report is work ÷ grid.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import triton

from .launches import GPUS, Launch, Shape, T, cfg_arch, flags
from .slice_launches import VARIANTS, slice_starts, slice_width

ARCHS = ("sm_90", "sm_100")  # configs.arch_of keys the path runs on (hopper.eligible)
_FWD_VARIANTS = ("plain", "softcap", "smooth", "smooth+softcap", "smooth+weight")
_FWD_VARIANTS += ("smooth+softcap+weight",)


def _desc(dtype: str, rows: int, cols: int, stride: int, block: list[int]):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor(T(dtype, rows * stride), [rows, cols], [stride, 1], block)


def forward_work(shape: Shape, arch: str, weighted: bool = False) -> tuple[int, int, int]:
    """(splits, split_size, items) of the TMA forward at ``shape`` on ``arch``'s GPU."""
    from perfsuite.kernels import forward
    from perfsuite.kernels.configs import tma_config

    cfg = tma_config("forward", cfg_arch(arch), weighted)
    slots = GPUS[cfg_arch(arch)][1] * cfg.ctas_per_sm
    splits = forward.splits_for(shape.n, shape.v, cfg.block_n, slots)
    grain = max(forward.SPLIT_GRAIN, cfg.block_v)
    split_size = triton.cdiv(triton.cdiv(shape.v, splits), grain) * grain
    return splits, split_size, triton.cdiv(shape.n, cfg.block_n) * splits


def _forward(shape: Shape, dtype: str, arch: str) -> Iterator[Launch]:
    from perfsuite.kernels import hopper
    from perfsuite.kernels.configs import tma_config

    n, v, d = shape.n, shape.v, shape.d
    for name in _FWD_VARIANTS:
        smooth, cap, weighted = flags(name, "smooth", "softcap", "weight")
        cfg = tma_config("forward", cfg_arch(arch), weighted)
        splits, split_size, items = forward_work(shape, arch, weighted)
        part = splits * n * 4
        args = {
            "e_desc": _desc(dtype, n, d, d, [cfg.block_n, cfg.block_d]),
            "c_desc": _desc(dtype, v, d, d, [cfg.block_v, cfg.block_d]),
            "CBar": T(torch.float32) if smooth and not cap else None,
            "MaxPart": T(torch.float32, offset=0),
            "SumPart": T(torch.float32, offset=part),
            "SmoothPart": T(torch.float32, offset=2 * part) if smooth else None,
            "Weight": T(torch.float32) if weighted else None,
            "softcap": shape.softcap if cap else None,
            "N": n,
            "V": v,
            "D": d,
            "split_size": split_size,
            "num_splits": splits,
            **cfg.meta("forward_tma"),
        }
        yield Launch(
            "forward_tma", name, dtype, arch, hopper._forward, args, cfg.num_warps,
            cfg.num_stages, config=cfg.describe(), declared_ctas=cfg.ctas_per_sm,
            work=items,
        )  # fmt: skip


def _slices(shape: Shape, dtype: str, arch: str) -> Iterator[Launch]:
    from perfsuite.kernels import hopper
    from perfsuite.kernels.configs import tma_config

    cfg = tma_config("slices", cfg_arch(arch))
    n, v, d = shape.n, shape.v, shape.d
    width = slice_width(shape, dtype)
    for name, (smooth, cap, weighted) in VARIANTS.items():
        sub = cfg.block_v // hopper.slice_subtiles(weighted)
        for suffix, v0, cols in slice_starts(shape, width):
            args = {
                "e_desc": _desc(dtype, n, d, d, [cfg.block_n, cfg.block_d]),
                "c_desc": _desc(dtype, v, d, d, [cfg.block_v, cfg.block_d]),
                # buf[:, :cols] of an (N, width) buffer: row stride width.
                "out_desc": _desc(dtype, n, cols, width, [cfg.block_n, sub]),
                "RowMax": T(torch.float32),
                "LogSum": T(torch.float32),
                "A": T(torch.float32),
                "B": T(torch.float32),
                "S": T(torch.float32) if smooth else None,
                "Weight": T(torch.float32) if weighted else None,
                "Targets": T(torch.int64),
                "InvScale": T(torch.float32, 1),
                "softcap": shape.softcap if cap else None,
                "N": n,
                "D": d,
                "v0": v0,
                "width": cols,
                **cfg.meta("slices_tma"),
            }
            tiles = triton.cdiv(n, cfg.block_n) * triton.cdiv(cols, cfg.block_v)
            yield Launch(
                "slices_tma", name + suffix, dtype, arch, hopper._grad_slice, args,
                cfg.num_warps, cfg.num_stages, config=f"{cfg.describe()}-W{width}",
                declared_ctas=cfg.ctas_per_sm, work=tiles,
            )  # fmt: skip


def launches(shape: Shape, dtype: str, arch: str) -> Iterator[Launch]:
    """Both TMA kernels' variants, 16-bit dtypes on sm_90a / sm_100a (none elsewhere)."""
    if cfg_arch(arch) not in ARCHS or dtype == "fp32":
        return
    yield from _forward(shape, dtype, arch)
    yield from _slices(shape, dtype, arch)


def tma_launches(
    shape: Shape, archs: list[str], dtypes: list[str], kernels: list[str] | None = None
) -> list[Launch]:
    """Every TMA build of the selection (``slice_launches.our_launches`` lists the rest)."""
    out = [la for arch in archs for dtype in dtypes for la in launches(shape, dtype, arch)]
    return [la for la in out if kernels is None or la.kernel in kernels]
