"""Static costs of the shipped configs at one shape, per representative GPU.

Counted from tile sizes alone over every (row block, vocab tile) pair, no filtering: the
forward's grid, and the backward's recompute, update, locked and L2 traffic for the
atomic-tile design (``backward="tiles"``) and CCE's; ``designs`` models every design.
"""

from __future__ import annotations

from typing import Any

import triton

from . import cce
from .launches import DTYPES, GPUS, Shape, native_atomics


def _waves(ctas: int, slots: int) -> dict[str, Any]:
    from perfsuite.kernels.forward import wave_efficiency

    return {"fwd_waves": triton.cdiv(ctas, slots), "last_wave_eff": wave_efficiency(ctas, slots)}


def pair_costs(
    shape: Shape,
    block_n: int,
    block_v: int,
    block_dd: int,
    locked: int,
    elem: int,
    de_elem: int,
    dc_elem: int,
) -> dict[str, Any]:
    """``locked``: how many of dE/dC go through a lock (0, 1 or 2); ``*_elem``: bytes
    per element of the dE and dC buffers the updates add into."""
    n, v, d = shape.n, shape.v, shape.d
    pairs = triton.cdiv(n, block_n) * triton.cdiv(v, block_v)
    acquisitions = locked * triton.cdiv(d, block_dd)  # per pair
    rmw_rows = {0: 0, 1: block_v, 2: block_v + block_n}[locked]
    return {
        "bwd_pairs": pairs,
        "recompute_gb": pairs * (block_n + block_v) * d * elem / 1e9,
        "update_gb": pairs * (block_n * de_elem + block_v * dc_elem) * d / 1e9,
        "locked_rmw_gb": pairs * rmw_rows * d * elem / 1e9,
        # The update loops re-read the pair's C slice (for dE) and E slice (for dC).
        "bwd_l2_gb": pairs
        * ((2 * (block_n + block_v) + rmw_rows) * elem + block_n * de_elem + block_v * dc_elem)
        * d
        / 1e9,
        "locks_per_pair": acquisitions,
        "lock_trips_per_1k_logits": 2 * acquisitions * 1000 / (block_n * block_v),
    }


def cost_rows(
    shape: Shape, measured_ctas: dict[tuple[str, str, str], int] | None = None
) -> list[dict[str, Any]]:
    """One row per implementation × GPU (ours; CCE when importable) at ``shape``.

    ``measured_ctas`` maps (kernel, arch key, dtype) to the CTAs per SM the build
    measured, shown next to the declared occupancy the launcher sizes its grid by.
    """
    from perfsuite.kernels import forward
    from perfsuite.kernels.configs import PINNED

    measured = measured_ctas or {}
    elem = DTYPES[shape.dtype].itemsize
    rows = []
    for arch, (gpu, sms) in GPUS.items():
        fwd = PINNED["forward", arch, shape.dtype]
        bwd = PINNED["backward", arch, shape.dtype]
        slots = sms * fwd.ctas_per_sm
        splits = forward.splits_for(shape.n, shape.v, fwd.block_n, slots)
        ctas = triton.cdiv(shape.n, fwd.block_n) * splits
        # dE is an fp32 buffer (hardware atomics everywhere); dC is in the input dtype.
        locked = int(not native_atomics(shape.dtype, arch))
        where = {"gpu": gpu, "sms": sms, "arch": arch}
        rows.append(
            {
                "impl": "ours",
                **where,
                "fwd_config": fwd.describe(),
                "bwd_config": bwd.describe(),
                "fwd_ctas": ctas,
                "fwd_splits": splits,
                "ctas_per_sm": fwd.ctas_per_sm,
                "measured_ctas_per_sm": measured.get(("forward", arch, shape.dtype)),
                **_waves(ctas, slots),
                "fwd_lock_trips_per_1k_logits": 0.0,
                **pair_costs(shape, bwd.block_n, bwd.block_v, bwd.block_dd, locked, elem, 4, elem),
            }
        )
        if cce.available() is None and shape.dtype in cce.DTYPES:
            g = cce.grid_sizes(shape)
            occ = measured.get(("cce_lse_forward", arch, shape.dtype))
            rows.append(
                {
                    "impl": "cce",
                    **where,
                    "fwd_config": g["fwd_config"],
                    "bwd_config": g["bwd_config"],
                    "fwd_ctas": g["fwd_ctas"],
                    "fwd_splits": None,
                    "ctas_per_sm": occ or 1,
                    "measured_ctas_per_sm": occ,
                    **_waves(g["fwd_ctas"], sms * (occ or 1)),
                    # One LSE lock per (row block, vocab tile) program.
                    "fwd_lock_trips_per_1k_logits": 2 * 1000 / g["fwd_logits_per_cta"],
                    # CCE locks both dE and dC, in the input dtype.
                    **pair_costs(
                        shape, g["block_n"], g["block_v"], g["block_dd"], 2, elem, elem, elem
                    ),
                }
            )
    return rows
