"""Static costs of the shipped configs at one shape per representative GPU, counted over
every (row block, vocab tile) pair (no filtering), and a roofline **model** per backward
design, never a measurement: ``_timed`` at the sourced ``RATES``, HBM bytes a lower bound,
cuBLAS's tiles assumed ``CUBLAS_TILE`` (the designs: docs/kernel.md)."""

from __future__ import annotations

from typing import Any

import triton

from . import cce
from .launches import DTYPES, GPUS, Shape, forward_grid, native_atomics, slice_width

Tiles = tuple[int, int, int]  # a pair backward's BLOCK_N, BLOCK_V and D chunk


def _waves(ctas: int, slots: int) -> dict[str, Any]:
    from perfsuite.kernels.forward import wave_efficiency

    return {"fwd_waves": triton.cdiv(ctas, slots), "last_wave_eff": wave_efficiency(ctas, slots)}


def _tile_backward(shape: Shape, arch: str, cfg: Any) -> tuple[Tiles, int, int]:
    """The tile backward's tiles, how many of dE/dC it locks (dC, in the input dtype, without
    16-bit atomics) and the bytes of a dE element (fp32: hardware atomics everywhere)."""
    return (cfg.block_n, cfg.block_v, cfg.block_dd), int(not native_atomics(shape.dtype, arch)), 4


def pair_costs(shape: Shape, tiles: Tiles, locked: int, de_elem: int) -> dict[str, Any]:
    """Traffic of one launch over every (row block, vocab tile) pair; ``locked``: how many of
    dE/dC go through a lock (0-2); ``de_elem``: bytes of a dE element (dC's: the input's)."""
    n, v, d = shape.n, shape.v, shape.d
    elem = DTYPES[shape.dtype].itemsize
    block_n, block_v, block_dd = tiles
    pairs = triton.cdiv(n, block_n) * triton.cdiv(v, block_v)
    acquisitions = locked * triton.cdiv(d, block_dd)  # per pair
    rmw_rows = {0: 0, 1: block_v, 2: block_v + block_n}[locked]
    update = block_n * de_elem + block_v * elem
    return {
        "bwd_pairs": pairs,
        "recompute_gb": pairs * (block_n + block_v) * d * elem / 1e9,
        "update_gb": pairs * update * d / 1e9,
        "locked_rmw_gb": pairs * rmw_rows * d * elem / 1e9,
        # The update loops re-read the pair's C slice (for dE) and E slice (for dC).
        "bwd_l2_gb": pairs * ((2 * (block_n + block_v) + rmw_rows) * elem + update) * d / 1e9,
        "locks_per_pair": acquisitions,
        "lock_trips_per_1k_logits": 2 * acquisitions * 1000 / (block_n * block_v),
    }


def cost_rows(
    shape: Shape,
    measured_ctas: dict[tuple[str, str, str], int] | None = None,
    with_cce: bool = False,
) -> list[dict[str, Any]]:
    """One row per implementation × GPU (CCE's ``with_cce``) at ``shape``; ``measured_ctas``:
    (kernel, arch key, dtype) -> the built CTAs/SM, shown beside the declared occupancy."""
    from perfsuite.kernels.configs import PINNED

    measured = measured_ctas or {}
    elem = DTYPES[shape.dtype].itemsize
    rows = []
    for arch, (gpu, sms) in GPUS.items():
        fwd = PINNED["forward", arch, shape.dtype]
        bwd = PINNED["backward", arch, shape.dtype]
        splits, _, ctas = forward_grid(shape, arch, fwd)
        row = {"impl": "ours", "gpu": gpu, "sms": sms, "arch": arch}
        row |= {"fwd_config": fwd.describe(), "bwd_config": bwd.describe(), "fwd_ctas": ctas}
        row |= {"fwd_splits": splits, "ctas_per_sm": fwd.ctas_per_sm}
        row["measured_ctas_per_sm"] = measured.get(("forward", arch, shape.dtype))
        row |= _waves(ctas, sms * fwd.ctas_per_sm) | {"fwd_lock_trips_per_1k_logits": 0.0}
        rows.append(row | pair_costs(shape, *_tile_backward(shape, arch, bwd)))
        if with_cce and shape.dtype in cce.DTYPES:
            g = cce.grid_sizes(shape)
            occ = measured.get(("cce_lse_forward", arch, shape.dtype))
            row = {"impl": "cce", "gpu": gpu, "sms": sms, "arch": arch}
            row |= {k: g[k] for k in ("fwd_config", "bwd_config", "fwd_ctas")}
            row |= {"fwd_splits": None, "ctas_per_sm": occ or 1, "measured_ctas_per_sm": occ}
            row |= _waves(g["fwd_ctas"], sms * (occ or 1))
            # One LSE lock per (row block, vocab tile) program.
            row["fwd_lock_trips_per_1k_logits"] = 2 * 1000 / g["fwd_logits_per_cta"]
            # CCE locks both dE and dC, in the input dtype.
            rows.append(row | pair_costs(shape, g["tiles"], 2, elem))
    return rows


CUBLAS_TILE = (128, 256)

# Rates of the roofline, per GPU; None leaves that term out (no sourced number).
RATES = {
    "H100": {"tflops": 650.0, "hbm_tbs": 3.35, "l2_tbs": 6.3},
    "A100": {"tflops": 312.0, "hbm_tbs": 2.039, "l2_tbs": None},
}
SOURCES = {
    "H100": "H100 SXM: 650 TFLOP/s bf16 as cuBLAS-class GEMMs reach on these shapes (issue 19: "
    "torch.compile ~630, Liger's Hopper backward 657; datasheet dense peak 989.5), HBM3 3.35 "
    "TB/s (datasheet), L2 6.3 TB/s (the 128×64 tile backward measured 131.6 ms for 830 GB of "
    "modelled L2 traffic, README)",
    "A100": "A100 SXM 80GB: 312 TFLOP/s bf16 dense peak and 2.039 TB/s HBM2e (datasheet; no "
    "achieved rate measured here); no L2 rate measured: L2 term left out, so A100 times are "
    "lower bounds",
}


def _slices(shape: Shape, arch: str) -> dict[str, Any]:
    from perfsuite.kernels.configs import PINNED

    n, v, d = shape.n, shape.v, shape.d
    e = DTYPES[shape.dtype].itemsize
    cfg = PINNED["slices", arch, shape.dtype]
    width = slice_width(shape, shape.dtype)
    slices = triton.cdiv(v, width)  # the S of the design table
    tm, tn = CUBLAS_TILE
    nvd = n * v * d * e
    g_trip = 3 * n * v * e  # G: written once, read by each GEMM
    de_rw = slices * 2 * n * d * 4  # fp32 dE read and written per slice
    # dE: zeroed, scaled (read + write), cast to the dtype (read fp32, write elem).
    de_fixed = n * d * (4 + 8 + 4 + e)
    hbm = g_trip + de_rw + de_fixed + slices * 2 * n * d * e + 3 * v * d * e
    l2 = (
        nvd * (1 / cfg.block_n + 1 / cfg.block_v)  # the logit GEMM's operand tiles
        + 2 * nvd * (1 / tm + 1 / tn)  # both cuBLAS GEMMs' operand tiles
        + n * v * e  # G stored
        + de_rw
        + v * d * e  # dC written once
    )
    row = {"design": "slices", "config": f"{cfg.describe()} + cuBLAS", "slices": slices}
    row |= {"width": width, "hbm_bytes": hbm, "g_trip_bytes": g_trip, "de_rw_bytes": de_rw}
    return row | {"l2_bytes": l2, "atomic_bytes": 0, "locked_bytes": 0}


def _pairs_design(name: str, config: str, shape: Shape, tiles: Tiles, locked: int,
                  de_e: int) -> dict[str, Any]:  # fmt: skip
    """The tile and CCE designs: one launch over (row block, vocab tile) pairs; ``locked``:
    0 (hardware adds into both), 1 (dC under a lock) or 2 (both locked)."""
    n, v, d = shape.n, shape.v, shape.d
    e = DTYPES[shape.dtype].itemsize
    c = pair_costs(shape, tiles, locked, de_e)
    de_upd, dc_upd = c["bwd_pairs"] * tiles[0] * d * de_e, c["bwd_pairs"] * tiles[1] * d * e
    atomic = {0: de_upd + dc_upd, 1: de_upd, 2: 0}[locked]
    locked_bytes = c["update_gb"] * 1e9 - atomic + c["locked_rmw_gb"] * 1e9
    # E, C read; dE and dC zeroed, updated in place (read + write once), dE cast if fp32.
    hbm = (n + v) * d * e + 3 * (n * d * de_e + v * d * e)
    if de_e != e:
        hbm += n * d * (de_e + e)
    row = {"design": name, "config": config, "slices": None, "width": None, "hbm_bytes": hbm}
    row |= {"g_trip_bytes": 0, "de_rw_bytes": 0, "l2_bytes": c["bwd_l2_gb"] * 1e9}
    return row | {"atomic_bytes": atomic, "locked_bytes": locked_bytes}


def _timed(row: dict[str, Any], flops: float, gpu: str) -> dict[str, Any]:
    rate = RATES[gpu]
    terms = {
        "gemm": flops / (rate["tflops"] * 1e12),
        "hbm": row["hbm_bytes"] / (rate["hbm_tbs"] * 1e12),
        "l2": None if rate["l2_tbs"] is None else row["l2_bytes"] / (rate["l2_tbs"] * 1e12),
    }
    known = {k: t for k, t in terms.items() if t is not None}
    bound = max(known, key=known.get)
    out = {**row, "gemm_tflop": flops / 1e12}
    out |= {f"{k}_ms": None if t is None else t * 1e3 for k, t in terms.items()}
    out |= {"modelled_ms": known[bound] * 1e3, "bound": bound}
    return out | {k: row[k] / 1e9 for k in row if k.endswith("_bytes")}


def design_rows(shape: Shape, with_cce: bool = False) -> list[dict[str, Any]]:
    """One row per GPU × backward design (CCE's ``with_cce`` and 16-bit) at ``shape``."""
    from perfsuite.kernels.configs import PINNED

    e = DTYPES[shape.dtype].itemsize
    # Every design: the logit GEMM again, then dE and dC: 3 GEMMs of 2·N·V·D each.
    flops = 3 * 2 * shape.n * shape.v * shape.d
    out = []
    for arch, (gpu, _) in GPUS.items():
        if gpu not in RATES:  # no sourced rates (B200): not modelled, rate_notes says so
            continue
        bwd = PINNED["backward", arch, shape.dtype]
        tiles = _pairs_design("tiles", bwd.describe(), shape, *_tile_backward(shape, arch, bwd))
        rows = [_slices(shape, arch), tiles]
        if with_cce and shape.dtype in cce.DTYPES:
            g = cce.grid_sizes(shape)
            rows.append(_pairs_design("cce", g["bwd_config"], shape, g["tiles"], 2, e))
        out += [{"gpu": gpu, "arch": arch, **_timed(row, flops, gpu)} for row in rows]
    return out


def rate_notes() -> list[str]:
    """The roofline's rates and their sources, one line per GPU."""
    lines = [f"design model rates, {gpu}: {source}" for gpu, source in SOURCES.items()]
    unrated = [gpu for gpu, _ in GPUS.values() if gpu not in RATES]
    lines += [f"design model: no {gpu} rates sourced, not modelled" for gpu in unrated]
    tm, tn = CUBLAS_TILE
    # bf16 operand bytes per FLOP of a tm×tn-tiled GEMM: 2·(1/tm + 1/tn) / 2.
    implied = RATES["H100"]["tflops"] * (1 / tm + 1 / tn)
    return lines + [
        f"design model: slices' two GEMMs are cuBLAS, tiles assumed {tm}x{tn}; the L2 "
        "rate is what the old tile backward sustained (atomics included), while cuBLAS "
        f"at {RATES['H100']['tflops']:.0f} TFLOP/s with such tiles moves its bf16 operands "
        f"at {implied:.1f} TB/s: the L2 term is pessimistic for plain GEMM loads, and the "
        "GEMM ms is every design's floor"
    ]
