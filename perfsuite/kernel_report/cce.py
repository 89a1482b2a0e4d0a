"""Cut-cross-entropy's kernels launched as its training path does, at the one config per
kernel ``tl_autotune`` ships (``_cce_*_best_config``), to build side by side."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import triton

from .launches import Launch, Shape, T

DTYPES = ("bf16", "fp16")  # CCE's backward takes 16-bit embeddings only


def available() -> str | None:
    """None when CCE's kernels import, else why not."""
    try:
        import cut_cross_entropy.cce_backward  # noqa: F401
        import cut_cross_entropy.cce_lse_forward  # noqa: F401
    except Exception as exc:  # ImportError, or a CUDA-only import path
        return f"cut_cross_entropy not importable ({type(exc).__name__}: {exc})"
    return None


def _configs() -> list[tuple[dict[str, Any], int, int, str]]:
    """(meta, warps, stages, its name) of CCE's forward, then its backward."""
    from cut_cross_entropy import tl_autotune

    out = []
    for cfg in (tl_autotune._cce_forward_best_config(), tl_autotune._cce_backward_best_config()):
        meta, warps, stages = cfg.kwargs, cfg.num_warps, cfg.num_stages
        name = f"B{meta['BLOCK_B']}-V{meta['BLOCK_V']}-D{meta['BLOCK_D']}-w{warps}-s{stages}"
        out.append((dict(meta), warps, stages, name))
    return out


def launches(shape: Shape, dtype: str, arch: str) -> Iterator[Launch]:
    """CCE's forward and backward, without and with softcap (16-bit only)."""
    from cut_cross_entropy import cce_backward, cce_lse_forward
    from cut_cross_entropy.tl_utils import b_bin_fn

    if dtype not in DTYPES:
        return
    n, v, d = shape.n, shape.v, shape.d
    (fmeta, fwarps, fstages, fname), (bmeta, bwarps, bstages, bname) = _configs()
    nd_locks = triton.cdiv(d, 64)
    common = {"E": T(dtype), "C": T(dtype), "LSE": T(torch.float32), "Valids": None}
    common |= {"B": n, "V": v, "D": d, "B_BIN": b_bin_fn(n)}
    common |= {"stride_eb": d, "stride_ed": 1, "stride_cv": d, "stride_cd": 1, "stride_vb": 1}
    for variant, cap in (("train", None), ("softcap", shape.softcap)):
        fwd = {**common, "LA": T(torch.float32), "Locks": T(torch.uint32), "softcap": cap}
        fwd |= {"stride_lse_b": 1, "num_locks": triton.cdiv(n, 128), **fmeta}
        kernel = cce_lse_forward._cce_lse_forward_kernel
        yield Launch("cce_lse_forward", variant, dtype, arch, kernel, fwd, fwarps, fstages,
                     config=fname, ours=False)  # fmt: skip
        bwd = {**common, "softcap": cap, "Targets": T(torch.int64), "REQUIRES_GRAD": True}
        # cce.py: a mean's scalar dOut and 1 / lse.numel(); sort_logit_avg's int32 order.
        bwd |= {"dOut": T(torch.float32, numel=1), "grad_scale": 1.0 / n}
        bwd |= {"VocabOrdering": T(torch.int32), "filter_eps": 2.0**-12, "SHIFT": False}
        bwd |= dict(dE=T(dtype), dELocks=T(torch.int32), dC=T(dtype), dCLocks=T(torch.int32))
        bwd |= dict(n_de_locks_0=triton.cdiv(n, nd_locks), n_de_locks_1=nd_locks)
        bwd |= dict(n_dc_locks_0=triton.cdiv(v, nd_locks), n_dc_locks_1=nd_locks, **bmeta)
        yield Launch("cce_backward", variant, dtype, arch, cce_backward._cce_backward_kernel,
                     bwd, bwarps, bstages, config=bname, ours=False)  # fmt: skip


def grid_sizes(shape: Shape) -> dict[str, Any]:
    """CCE's forward grid and backward tile sizes at ``shape`` (for the cost table)."""
    (fmeta, fwarps, fstages, fname), (bmeta, bwarps, bstages, bname) = _configs()
    fwd_ctas = triton.cdiv(shape.n, fmeta["BLOCK_B"]) * triton.cdiv(shape.v, fmeta["BLOCK_V"])
    out = {"fwd_ctas": fwd_ctas, "fwd_config": fname, "bwd_config": bname}
    out["fwd_logits_per_cta"] = fmeta["BLOCK_B"] * fmeta["BLOCK_V"]
    # Its tiles; _mm_backward walks D in 2·BLOCK_D chunks, a lock per chunk of dE and dC.
    return out | {"tiles": (bmeta["BLOCK_B"], bmeta["BLOCK_V"], 2 * bmeta["BLOCK_D"])}
