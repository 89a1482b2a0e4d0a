"""The ablations' entry point: the atomic-tile backward and its gradient filters, kept
to measure against (the only backward that can skip tiles); off the public signature,
where the benchmark's ``ours-tiles*`` methods reach them."""

from __future__ import annotations

from typing import Any

import torch

from .api import _linear_cross_entropy


def tiled_linear_cross_entropy(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    *,
    filter_eps: float | str | None = None,
    sort_vocab: bool = True,
    accum_fp32: bool = False,
    tile_list: bool = True,
    **options: Any,
) -> torch.Tensor:
    """``linear_cross_entropy`` (same ``options``) with the atomic-tile backward.

    Args:
        filter_eps: gradient filtering (default ``None``: exact; "auto":
            ``finfo(dtype).eps / 32``, CCE's value). With ``tile_list`` it is the largest
            per-row threshold on a vocab tile's softmax mass; rows get smaller ones so
            that what they drop stays within ``finfo(dtype).eps / 8`` of probability
            (kernels/tiles.py). Without, CCE's element filter: a tile is skipped when all
            its terms fall below it (fast, lossy on flat or heavy-tailed rows). Targets
            and smoothing are exact either way.
        sort_vocab: with ``tile_list=False``, visit vocab tiles by decreasing average
            logit so filtered tiles cluster (CCE's sorting).
        accum_fp32: also accumulate dC in fp32 for bf16/fp16 inputs (dE always is:
            N·D·4 bytes; dC costs V·D·4 more).
        tile_list: with filtering, launch the backward only over the (row block, vocab
            tile) pairs the per-row mass budget keeps, from per-tile log-sum-exps the
            forward stores (N·⌈V/BLOCK_V⌉·2 bytes).

    Class weights, z-loss, ``return_lse`` and ``vocab_parallel`` need the slice
    backward and raise ``ValueError`` here.
    """
    return _linear_cross_entropy(
        e, c, targets, backward="tiles", filter_eps=filter_eps, sort_vocab=sort_vocab,
        accum_fp32=accum_fp32, tile_list=tile_list, **options,
    )  # fmt: skip
