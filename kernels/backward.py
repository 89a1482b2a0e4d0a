"""The tile backward (an ablation: kernels/ablations.py): recompute logit tiles and add
their softmax part to dE/dC. The target and rank-one smoothing parts are exact and outside
the tiles, so skipping a tile (gradient filtering: tiles.py) drops softmax mass and nothing
else. Updates: hardware atomics where native (``native_atomics``), else a spin lock.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from .common import cast, dot, grouped, locked_add, logit_tile, tanh, tanh_scale, wide_offsets
from .configs import GROUP_N, autotune_enabled, autotune_space, interpreting, pinned_config
from .forward import ForwardResult, dot_precision
from .reductions import column_sum
from .slices import row_chunks
from .tiles import TileList, build_tile_list, row_thresholds


def native_atomics(buf: torch.Tensor) -> bool:
    """Whether ``tl.atomic_add`` on ``buf`` is a hardware add: fp32 anywhere, 16-bit on sm_90+
    (sm_80's CAS loop is dearer than the lock, which the interpreter runs for 16-bit)."""
    if buf.dtype == torch.float32:
        return True
    if buf.device.type != "cuda" or interpreting():
        return False
    return torch.cuda.get_device_capability(buf.device)[0] >= 9


_HEURISTICS = {
    "EVEN_D": lambda a: a["D"] % a["BLOCK_D"] == 0,
    "HAS_SMOOTHING": lambda a: a["smooth_w"] > 0,
    "HAS_SOFTCAP": lambda a: a["softcap"] is not None,
    "FILTER": lambda a: a["RowEps"] is not None,
    "SORTED": lambda a: a["Order"] is not None,
    "USE_LIST": lambda a: a["TileList"] is not None,
    "DE_ATOMIC": lambda a: native_atomics(a["dE"]),
    "DC_ATOMIC": lambda a: native_atomics(a["dC"]),
    "GROUP_N": lambda a: GROUP_N,
    "DOT_PRECISION": lambda a: dot_precision(a["E"].dtype),
    # Interpreter-only fixes (fp64 dots, round-to-nearest bf16 casts); False on GPUs.
    "UPCAST_DOT": lambda a: interpreting(),
    # Lock backoff sleeps with inline PTX, which the interpreter cannot run.
    "BACKOFF": lambda a: not interpreting(),
}


@triton.jit
def _update(
    ptrs, values, mask, lock, ATOMIC: tl.constexpr, FIX_BF16: tl.constexpr, BACKOFF: tl.constexpr
):
    """``*ptrs += values``: a relaxed hardware atomic, or a locked read-modify-write of the
    update rounded before the lock (no tensor-core work in the critical section)."""
    update = cast(values, ptrs.dtype.element_ty, FIX_BF16)
    if ATOMIC:
        tl.atomic_add(ptrs, update, mask=mask, sem="relaxed")
    else:
        locked_add(ptrs, update, mask, lock, FIX_BF16, BACKOFF)


@triton.jit
def _backward_kernel(
    E,
    C,
    RowMax,
    LogSum,
    G,
    Order,
    TileList,
    TileCount,
    dE,
    dC,
    dELocks,
    dCLocks,
    softcap,
    smooth_w,
    RowEps,
    N,
    V,
    D,
    stride_en,
    stride_ed,
    stride_cv,
    stride_cd,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DD: tl.constexpr,
    GROUP_N: tl.constexpr,
    EVEN_D: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    FILTER: tl.constexpr,
    SORTED: tl.constexpr,
    USE_LIST: tl.constexpr,
    DE_ATOMIC: tl.constexpr,
    DC_ATOMIC: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    BACKOFF: tl.constexpr,
):
    """Recompute one (row block, vocab tile) of logits and add its dE/dC parts: the
    ``pid``-th pair of the tile list (programs past its device-side count exit at once)
    or of the grouped order (L2 reuse of C)."""
    pid = tl.program_id(0)
    num_v = tl.cdiv(V, BLOCK_V)
    listed = True
    if USE_LIST:
        listed = pid < tl.load(TileCount)
        entry = tl.load(TileList + pid, mask=listed, other=0)
        pid_n = entry // num_v
        pid_v = entry % num_v
    else:
        pid_n, pid_v = grouped(pid, tl.cdiv(N, BLOCK_N), num_v, GROUP_N)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    g = tl.load(G + offs_n, mask=n_mask & listed, other=0.0)
    # Blocks of ignored rows (a masked prompt) and unlisted programs cost one load.
    if tl.max(tl.abs(g), axis=0) > 0:
        offs_lin = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
        v_mask = offs_lin < V
        if SORTED:
            offs_v = tl.load(Order + offs_lin, mask=v_mask, other=0)
        else:
            offs_v = tl.where(v_mask, offs_lin, 0)
        e_rows = wide_offsets(offs_n % N, stride_en)
        c_rows = wide_offsets(offs_v, stride_cv)
        acc = logit_tile(
            E, C, e_rows, c_rows, stride_ed, stride_cd, D,
            BLOCK_N, BLOCK_V, BLOCK_D, EVEN_D, DOT_PRECISION, UPCAST_DOT,
        )  # fmt: skip

        if HAS_SOFTCAP:
            t = tanh(acc, tanh_scale(softcap))
            acc = softcap * t
        row_max = tl.load(RowMax + offs_n % N)
        log_sum = tl.load(LogSum + offs_n % N)
        live = n_mask & (g != 0)
        # (z − max) − log-sum: exact cancellation of a common logit offset.
        prob = tl.exp((acc - row_max[:, None]) - log_sum[:, None])
        # The softmax part only: the target part −(1−β)(1−t_y²) is added to dE and dC
        # exactly, in fp32, outside the tiles (launcher).
        grad = prob
        if HAS_SOFTCAP:
            grad = grad * (1.0 - t * t)
            if HAS_SMOOTHING:
                grad += smooth_w * t * t
        grad = tl.where(live[:, None] & v_mask[None, :], grad, 0.0)

        keep = True
        if FILTER:
            # Per-row thresholds (tiles.row_filter_eps): skip a tile whose every term is small.
            # Row maxima, then one flat max: an axis-0 max of them crashed Triton 3.7.1 on sm_100a.
            row_eps = tl.load(RowEps + offs_n % N)
            keep = tl.max((tl.max(tl.abs(grad), axis=1) >= row_eps).to(tl.int32)) > 0
        if keep:
            grad_t = cast(grad * g[:, None], E.dtype.element_ty, UPCAST_DOT)
            n_dd = tl.cdiv(D, BLOCK_DD)
            for dd in range(0, n_dd):
                offs_dd = dd * BLOCK_DD + tl.arange(0, BLOCK_DD)
                dd_mask = offs_dd < D
                c_chunk = tl.load(
                    C + c_rows[:, None] + offs_dd[None, :] * stride_cd,
                    mask=dd_mask[None, :],
                    other=0.0,
                )
                de = dot(grad_t, c_chunk, None, DOT_PRECISION, UPCAST_DOT)
                de_ptrs = dE + wide_offsets(offs_n, D)[:, None] + offs_dd[None, :]
                de_mask = n_mask[:, None] & dd_mask[None, :]
                lock = dELocks + pid_n * n_dd + dd
                _update(de_ptrs, de, de_mask, lock, DE_ATOMIC, UPCAST_DOT, BACKOFF)
            grad_tt = tl.trans(grad_t)
            for dd in range(0, n_dd):
                offs_dd = dd * BLOCK_DD + tl.arange(0, BLOCK_DD)
                dd_mask = offs_dd < D
                e_chunk = tl.load(
                    E + e_rows[:, None] + offs_dd[None, :] * stride_ed,
                    mask=dd_mask[None, :],
                    other=0.0,
                )
                dc = dot(grad_tt, e_chunk, None, DOT_PRECISION, UPCAST_DOT)
                dc_ptrs = dC + wide_offsets(offs_v, D)[:, None] + offs_dd[None, :]
                dc_mask = v_mask[:, None] & dd_mask[None, :]
                lock = dCLocks + pid_v * n_dd + dd
                _update(dc_ptrs, dc, dc_mask, lock, DC_ATOMIC, UPCAST_DOT, BACKOFF)


_backward = triton.heuristics(_HEURISTICS)(_backward_kernel)


@functools.cache
def _tuned(flags: tuple[bool, ...]):
    """An autotuner per variant; dE/dC are restored between trials (they accumulate)."""
    space = autotune_space("backward")
    return triton.autotune(space, key=["N", "V", "D"], restore_value=["dE", "dC"])(_backward)


def default_filter_eps(dtype: torch.dtype) -> float:
    """CCE's choice: below this a softmax term does not survive rounding into the dtype."""
    return torch.finfo(dtype).eps / 32


# Lock arrays are sized for the smallest tiles any config may use.
_MIN_BLOCK = 16
# The last backward's tile list (benchmarks read its launched fraction).
LAST_TILES: list[TileList | None] = [None]


def lce_backward(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    s: ForwardResult,
    g: torch.Tensor,
    *,
    cbar: torch.Tensor | None,
    p,
) -> tuple[torch.Tensor, torch.Tensor]:
    """dE (N, D) and dC (V, D) in the inputs' dtypes for per-row upstream gradients ``g``
    from the forward's ``s`` and ``p`` (function.Params). dE accumulates in fp32 (16-bit
    read-modify-writes over thousands of tiles lose precision), dC too with ``accum_fp32``."""
    n_rows, dim = e.shape
    vocab = c.shape[0]
    sizes = (n_rows, vocab, dim)
    # CCE's vocab sorting: tiles by decreasing average logit, so filtered tiles cluster.
    order = None
    if s.logit_avg is not None:
        order = torch.argsort(s.logit_avg, descending=True).to(torch.int32)
    tiles = row_eps = None
    if s.tile_lse is not None and p.filter_eps is not None:
        # Tile list (tiles.py): a per-row mass budget decides; no in-kernel filter.
        cfg = pinned_config("backward", e.dtype, e.device, sizes)
        extra = cfg.block_v * p.beta / vocab if p.softcap is not None else 0.0
        tau = row_thresholds(
            s.tile_lse, s.row_max, s.log_sum, filter_eps=p.filter_eps, extra=extra, dtype=e.dtype
        )
        stats = (s.tile_lse, s.tile_width, s.row_max, s.log_sum)
        blocks = dict(vocab=vocab, block_n=cfg.block_n, block_v=cfg.block_v)
        tiles = build_tile_list(*stats, g, tau, **blocks, extra=extra)
    elif p.filter_eps is not None:
        # CCE's element filter: a tile is skipped when all its terms are < filter_eps.
        row_eps = torch.full_like(g, p.filter_eps)
    LAST_TILES[0] = tiles
    beta, softcap, row_max, log_sum = p.beta, p.softcap, s.row_max, s.log_sum
    smooth_w = beta / vocab
    # The target part's weight per row, (1−β)·∂z_y/∂l_y: (1−β)(1 − tanh²) with softcap.
    if softcap is None:
        target_w = torch.full_like(s.target_logit, 1.0 - beta)
    else:
        t = s.target_logit / softcap
        target_w = (1.0 - beta) * (1.0 - t * t)
    de = torch.empty((n_rows, dim), device=e.device, dtype=torch.float32)
    dc_dtype = torch.float32 if p.accum_fp32 else e.dtype
    dc = torch.empty((vocab, dim), device=e.device, dtype=dc_dtype)
    if beta > 0:
        # Rank-one smoothing part, exact and outside the tiles (math.md):
        # dE_n = −(β/V) g_n c̄,  dC_v = −(β/V) Σ_n g_n E_n for every v.
        assert cbar is not None
        torch.mul(g[:, None], (cbar * -smooth_w)[None, :], out=de)
        dc.copy_((column_sum(e, g) * -smooth_w).expand(vocab, dim))
    else:
        de.zero_()
        dc.zero_()
    # dE's target part, exact: −g_n·w_n·C[y_n], accumulated in fp32 in place.
    rows = targets.clamp(0, vocab - 1)
    weights = (g * target_w)[:, None]
    for part in row_chunks(n_rows):
        de[part].addcmul_(weights[part], c.index_select(0, rows[part]), value=-1.0)

    cfg = None if autotune_enabled() else pinned_config("backward", e.dtype, e.device, sizes)
    n_dd = triton.cdiv(dim, _MIN_BLOCK)
    split = triton.cdiv(n_rows, _MIN_BLOCK) * n_dd
    size = split + triton.cdiv(vocab, _MIN_BLOCK) * n_dd
    locks = torch.zeros(size, device=e.device, dtype=torch.int32)
    de_locks, dc_locks = locks[:split], locks[split:]

    def grid(meta: dict) -> tuple[int]:
        return (triton.cdiv(n_rows, meta["BLOCK_N"]) * triton.cdiv(vocab, meta["BLOCK_V"]),)

    args = (
        e, c, row_max, log_sum, g, order,
        None if tiles is None else tiles.entries,
        None if tiles is None else tiles.count,
        de, dc, de_locks, dc_locks,
        softcap, smooth_w, row_eps, *sizes,
        e.stride(0), e.stride(1), c.stride(0), c.stride(1),
    )  # fmt: skip
    if cfg is None:
        flags = (beta > 0, softcap is not None, row_eps is not None, order is not None)
        _tuned((*flags, tiles is not None, de.dtype == dc.dtype))[grid](*args)
    else:
        _backward[grid](*args, **cfg.launch("backward"))
    de_out = de.to(e.dtype)
    # dC's target part, exact: dC[y_n] −= g_n·w_n·E_n. A 16-bit dC gets each target's rows
    # summed in fp32 first (one segment per distinct target, no host sync, in dE's N×D fp32
    # buffer, free once rounded: 16-bit dC means 16-bit inputs) and added once.
    if dc.dtype == torch.float32:
        for part in row_chunks(n_rows):
            dc.index_add_(0, rows[part], e[part].float() * weights[part], alpha=-1.0)
        return de_out, dc.to(e.dtype)
    sorted_rows, perm = rows.sort()
    seg = torch.zeros_like(sorted_rows)
    seg[1:] = (sorted_rows[1:] != sorted_rows[:-1]).cumsum(0)
    sums = de.zero_()
    for part in row_chunks(n_rows):
        idx = perm[part]
        sums.index_add_(0, seg[part], e.index_select(0, idx).float() * weights[idx])
    # Unused segments hold zeros and point at row 0: adding 0 changes nothing.
    seg_rows = torch.zeros_like(sorted_rows).scatter_(0, seg, sorted_rows)
    for part in row_chunks(n_rows):
        dc.index_add_(0, seg_rows[part], sums[part].neg().to(dc.dtype))
    return de_out, dc.to(e.dtype)
