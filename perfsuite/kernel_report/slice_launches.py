"""The default backward's Triton kernel (``slices._grad_slice_kernel``) as launched, and
the registry of every launch of ours (apart from ``launches``: it builds on its helpers).

Launched per vocab slice with ``v0`` and the width as plain ints, which Triton
specialises by divisibility by 16: at most two binaries per shape (``+last`` when the
last slice differs), at the width ``slices.slice_width`` picks on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from unittest import mock

import torch
import triton

from .launches import DTYPES, Launch, Shape, T, _strides, backward_inputs, cfg_arch, flags

# (smoothing, softcap, class weights) of the variants a real launch can get. Class
# weights reach the kernel only through the smoothing term (S·w_v); without smoothing
# they are folded into the per-row coefficients A and B, and the build is the plain one.
_NAMES = ("plain", "softcap", "smooth", "smooth+softcap", "smooth+weight", "smooth+softcap+weight")
VARIANTS = {name: flags(name, "smooth", "softcap", "weight") for name in _NAMES}


def slice_width(shape: Shape, dtype: str) -> int:
    """Columns per slice on a GPU at ``shape`` under the default budget (slices.py)."""
    from perfsuite.kernels import slices

    cuda = torch.device("cuda", 0)
    # The probe needs a GPU; on one it finds cuBLAS's fp32-output GEMM (torch ≥ 2.8).
    with mock.patch.object(slices, "_fp32_out_mm", lambda device: True):
        per = slices.bytes_per_column(shape.n, shape.d, DTYPES[dtype], cuda, "triton", False)
    return slices.slice_width(shape.v, per, slices.DEFAULT_BUDGET)


def _int_key(x: int) -> tuple[bool, bool]:
    """How Triton specialises an int argument: == 1 (a constant), divisible by 16."""
    return x == 1, x % 16 == 0


def slice_starts(shape: Shape, width: int) -> list[tuple[str, int, int]]:
    """(suffix, v0, columns) of each distinct specialisation among the shape's slices."""
    starts = list(range(0, shape.v, width))
    out: list[tuple[str, int, int]] = []
    seen = set()
    for i, v0 in enumerate(starts):
        cols = min(width, shape.v - v0)
        key = (_int_key(v0), _int_key(cols))
        if key not in seen:
            seen.add(key)
            out.append(("" if i == 0 else "+last" if i == len(starts) - 1 else f"+{i}", v0, cols))
    return out


def launches(shape: Shape, dtype: str, arch: str) -> Iterator[Launch]:
    """Every variant × distinct slice specialisation of ``_grad_slice_kernel``."""
    from perfsuite.kernels import slices
    from perfsuite.kernels.configs import PINNED

    cfg = PINNED["slices", cfg_arch(arch), dtype]
    n, d = shape.n, shape.d
    width = slice_width(shape, dtype)
    for name, (smooth, cap, weighted) in VARIANTS.items():
        beta = shape.beta if smooth else 0.0
        for suffix, v0, cols in slice_starts(shape, width):
            inputs = backward_inputs(dtype)
            del inputs["G"]
            args = {
                **inputs,
                # terms.Coefficients: A, B and (β > 0) S; the class weights, fp32 (V,).
                "A": T(torch.float32),
                "B": T(torch.float32),
                "S": T(torch.float32) if beta > 0 else None,
                "Weight": T(torch.float32) if weighted else None,
                "Targets": T(torch.int64),  # targets.contiguous(): the caller's int64
                "InvScale": T(torch.float32, 1),
                # buf[:, :cols] of an (N, width) buffer: row stride width.
                "Out": T(dtype, n * width),
                "softcap": shape.softcap if cap else None,
                "N": n,
                "D": d,
                "v0": v0,
                "width": cols,
                **_strides(d),
                "stride_on": width,
                **cfg.meta("slices"),
            }
            yield Launch(
                "slices", name + suffix, dtype, arch, slices._grad_slice, args,
                cfg.num_warps, cfg.num_stages, config=f"{cfg.describe()}-W{width}",
                declared_ctas=cfg.ctas_per_sm,
            )  # fmt: skip


def slice_count(shape: Shape, dtype: str) -> tuple[int, int]:
    """(width, number of slices) at ``shape``: the design cost table's S."""
    width = slice_width(shape, dtype)
    return width, triton.cdiv(shape.v, width)


def our_launches(
    shape: Shape, archs: list[str], dtypes: list[str], kernels: list[str] | None = None
) -> list[Launch]:
    """Every shipped (kernel, arch, dtype) config × variant, optionally for some kernels
    (the TMA fast path's builds: ``tma_launches.tma_launches``)."""
    from perfsuite.kernels.configs import shipped_configs

    from .launches import _backward, _forward, _helpers

    groups = {"forward": _forward, "slices": launches, "backward": _backward, "helpers": _helpers}
    shipped = {(k, a, dt) for k, a, dt, _ in shipped_configs()}
    out = []
    for arch in archs:
        for dtype in dtypes:
            for group, make in groups.items():
                if group == "helpers" or (group, cfg_arch(arch), dtype) in shipped:
                    out += make(shape, dtype, arch)
    return [la for la in out if kernels is None or la.kernel in kernels]
