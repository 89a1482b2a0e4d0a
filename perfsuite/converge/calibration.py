"""Calibration metrics of predicted next-token distributions.

Top-1 metrics come from torchmetrics' ``multiclass_calibration_error`` (equal-width
bins on the top-1 confidence): ``l1`` is ECE, ``l2`` is RMS-CE, ``max`` is MCE.
torchmetrics has no class-wise metrics, so the two from Nixon et al. 2019
("Measuring Calibration in Deep Learning") are written here:

* SCE, static calibration error: for every class k, equal-width bins on p_k over
  all samples; ``SCE = 1/K sum_k sum_b n_bk/N |acc(b,k) - conf(b,k)|`` where
  ``acc`` is the fraction of the bin's samples labelled k and ``conf`` its mean p_k.
* ACE, adaptive calibration error: the same per class, but R equal-mass bins
  (the samples sorted by p_k, cut into R runs of N/R), unweighted:
  ``ACE = 1/(K R) sum_k sum_r |acc(r,k) - conf(r,k)|``.

SCE uses torchmetrics' bin edges (``[b/B, (b+1)/B)``, p = 1 in a bin of its own),
so SCE over two classes of a binary problem lines up with the top-1 ECE convention.
"""

from __future__ import annotations

import torch

N_BINS = 15


def top1_calibration(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = N_BINS) -> dict:
    """ECE (l1), RMS-CE (l2) and MCE (max) of ``probs (N, K)`` against ``labels (N,)``."""
    from torchmetrics.functional.classification import multiclass_calibration_error

    probs = probs.double()
    out = {}
    for name, norm in (("ece", "l1"), ("rms_ce", "l2"), ("mce", "max")):
        value = multiclass_calibration_error(
            probs, labels, num_classes=probs.shape[1], n_bins=n_bins, norm=norm
        )
        out[name] = float(value)
    return out


def static_calibration_error(
    probs: torch.Tensor, labels: torch.Tensor, n_bins: int = N_BINS
) -> float:
    """SCE (Nixon et al. 2019): class-wise ECE with equal-width bins, averaged over classes."""
    probs = probs.double()
    n, k = probs.shape
    edges = torch.linspace(0, 1, n_bins + 1, dtype=probs.dtype, device=probs.device)
    bins = torch.bucketize(probs, edges, right=True) - 1  # n_bins + 1 slots, as torchmetrics
    slots = n_bins + 1
    key = (torch.arange(k, device=probs.device) * slots).unsqueeze(0) + bins
    onehot = torch.zeros_like(probs)
    onehot[torch.arange(n, device=probs.device), labels] = 1.0
    conf = torch.bincount(key.reshape(-1), probs.reshape(-1), minlength=k * slots)
    acc = torch.bincount(key.reshape(-1), onehot.reshape(-1), minlength=k * slots)
    # |sum(acc) - sum(conf)| / N is n_bk/N * |acc(b,k) - conf(b,k)|; empty bins give 0.
    return float((acc - conf).abs().sum() / (n * k))


def adaptive_calibration_error(
    probs: torch.Tensor, labels: torch.Tensor, n_bins: int = N_BINS
) -> float:
    """ACE (Nixon et al. 2019): per class, ``n_bins`` equal-mass bins over sorted p_k."""
    probs = probs.double()
    n, k = probs.shape
    r = min(n_bins, n)
    onehot = torch.zeros_like(probs)
    onehot[torch.arange(n, device=probs.device), labels] = 1.0
    sorted_p, order = probs.sort(dim=0, stable=True)
    sorted_acc = onehot.gather(0, order)
    # Position i of the sorted column goes to bin floor(i R / N): sizes differ by at most 1.
    bin_of = (torch.arange(n, device=probs.device) * r) // n
    conf = torch.zeros(r, k, dtype=probs.dtype, device=probs.device).index_add_(0, bin_of, sorted_p)
    acc = torch.zeros_like(conf).index_add_(0, bin_of, sorted_acc)
    size = torch.bincount(bin_of, minlength=r).to(probs.dtype).unsqueeze(1)
    return float(((acc - conf).abs() / size).mean())


def calibration_metrics(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = N_BINS) -> dict:
    """All five: ECE, RMS-CE, MCE (top-1, torchmetrics), SCE and ACE (class-wise, here)."""
    return {
        **top1_calibration(probs, labels, n_bins),
        "sce": static_calibration_error(probs, labels, n_bins),
        "ace": adaptive_calibration_error(probs, labels, n_bins),
        "n_bins": n_bins,
    }
