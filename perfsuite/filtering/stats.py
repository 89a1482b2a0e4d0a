"""A workload's summary: entropy and entries above a threshold (a flat softmax leaves a
filter nothing to skip) and the *frequency direction* ``û = ē / |ē|`` (``ē · C_v`` is each
entry's average logit, CCE's sort key), whose *share* ``‖M û‖_F / ‖M‖_F`` of a matrix is
1 along û and about ``1/√D`` for random rows: does a synthetic workload look trained?"""

from __future__ import annotations

from typing import Any

import torch

from perfsuite.plan.workloads import _chunk_rows, _softcapped

CCE_THRESHOLD = 2.0**-12  # CCE's default filter_eps for bf16: eps(bf16) / 32


@torch.no_grad()
def softmax_stats(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    softcap: float | None = None,
    threshold: float = CCE_THRESHOLD,
    ignore_index: int = -100,
) -> dict[str, float]:
    """Mean entropy (nats), the fraction of softmax entries ≥ ``threshold`` and the mean
    top-1 probability over the non-ignored rows, from fp32 logits a chunk at a time."""
    cf = c.float()
    live = targets != ignore_index
    entropy = above = top = 0.0
    rows = 0
    step = _chunk_rows(c.shape[0])
    for start in range(0, e.shape[0], step):
        stop = start + step
        keep = live[start:stop]
        logp = torch.log_softmax(_softcapped(e[start:stop][keep].float() @ cf.T, softcap), -1)
        p = logp.exp()
        entropy += float(-(p * logp).sum(-1).double().sum())
        above += float((p >= threshold).sum())
        top += float(p.max(-1).values.double().sum())
        rows += int(keep.sum())
    if not rows:
        raise ValueError("every target is ignored: no rows to measure")
    return {
        "mean_entropy": entropy / rows,
        "fraction_at_or_above_threshold": above / (rows * c.shape[0]),
        "threshold": threshold,
        "mean_top1": top / rows,
        "rows": rows,
    }


def frequency_shares(e: torch.Tensor, c: torch.Tensor) -> dict[str, float]:
    """The frequency direction's share of E's and of C's Frobenius norm (module doc)."""
    ef, cf = e.float(), c.float()
    mean = ef.mean(0)
    if not mean.norm() > 0:
        raise ValueError("the hidden states average to zero: no frequency direction")
    u = mean / mean.norm()  # û: the unit mean hidden state, the average logit's direction
    return {
        "share_e": float((ef @ u).norm() / ef.norm()),
        "share_c": float((cf @ u).norm() / cf.norm()),
        "mean_row_norm_e": float(ef.norm(dim=1).mean()),
        "mean_row_norm_c": float(cf.norm(dim=1).mean()),
        "random_share": float(e.shape[1] ** -0.5),
    }


def workload_summary(
    e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor, softcap: float | None = None
) -> dict[str, Any]:
    """Shape, softmax statistics at CCE's bf16 threshold and the frequency geometry."""
    return {
        "tokens": e.shape[0],
        "vocab": c.shape[0],
        "hidden": c.shape[1],
        "softcap": softcap,
        **softmax_stats(e, c, targets, softcap),
        **frequency_shares(e, c),
    }
