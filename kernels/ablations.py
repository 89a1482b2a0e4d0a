"""The ablations' entry point, off the public signature: the atomic-tile backward and its
gradient filters (the only backward that can skip tiles), which ``ours-tiles*`` measure."""

from __future__ import annotations

from typing import Any

import torch

from .api import _linear_cross_entropy


def tiled_linear_cross_entropy(
    e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor, **options: Any
) -> torch.Tensor:
    """``linear_cross_entropy`` (same ``options``, but for class weights, z-loss,
    ``return_lse`` and ``vocab_parallel``: ``ValueError``) with the atomic-tile backward.

    Args:
        filter_eps: gradient filtering (``None``, the default: exact; "auto": CCE's
            ``finfo(dtype).eps / 32``). With ``tile_list``, the largest per-row threshold
            on a vocab tile's softmax mass, each row dropping at most ``eps / 8`` of
            probability (kernels/tiles.py); without, CCE's element filter (a tile whose
            terms all fall below it is skipped: lossy on heavy-tailed rows).
        sort_vocab: with ``tile_list=False``, CCE's vocab sorting (default True).
        accum_fp32: also accumulate dC in fp32 for 16-bit inputs (V·D·4 bytes more; False).
        tile_list: (default True) with filtering, launch only the (row block, vocab tile)
            pairs the per-row mass budget keeps (N·⌈V/BLOCK_V⌉·2 bytes of per-tile LSEs).
    """
    return _linear_cross_entropy(e, c, targets, backward="tiles", **options)
