"""Calibration of predicted next-token distributions (docs/converge.md): ECE, RMS-CE and MCE
through torchmetrics' binary form on (top-1 confidence, hit), SCE and ACE written here,
``CLASS_CHUNK`` classes at a time in fp64: a 32k vocabulary needs no ``N x K`` copy."""

from __future__ import annotations

import torch

N_BINS = 15
CLASS_CHUNK = 2048


def top1(probs: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-1 confidence (fp64) and whether the top-1 class is the label (0/1, fp64)."""
    conf, pred = probs.max(dim=1)
    return conf.double(), (pred == labels).double()


def top1_calibration(
    conf: torch.Tensor, correct: torch.Tensor, n_bins: int = N_BINS
) -> dict[str, float]:
    """ECE (l1), RMS-CE (l2) and MCE (max) from top-1 confidences and hits."""
    from torchmetrics.functional.classification import binary_calibration_error

    target = correct.long()
    return {
        name: float(binary_calibration_error(conf, target, n_bins=n_bins, norm=norm))
        for name, norm in (("ece", "l1"), ("rms_ce", "l2"), ("mce", "max"))
    }


def reliability(
    conf: torch.Tensor, correct: torch.Tensor, n_bins: int = N_BINS
) -> dict[str, list[float]]:
    """Per equal-width bin (torchmetrics', confidence 1 in the last): count, mean confidence
    and accuracy (empty: 0); the count-weighted mean of ``|accuracy - confidence|`` is the ECE."""
    edges = torch.linspace(0, 1, n_bins + 1, dtype=conf.dtype, device=conf.device)
    bins = (torch.bucketize(conf, edges, right=True) - 1).clamp_(0, n_bins - 1)
    count = torch.bincount(bins, minlength=n_bins).double()
    conf_sum = torch.bincount(bins, conf, minlength=n_bins)
    hit_sum = torch.bincount(bins, correct, minlength=n_bins)
    safe = count.clamp_min(1)
    return {
        "count": count.cpu().tolist(),
        "confidence": (conf_sum / safe).cpu().tolist(),
        "accuracy": (hit_sum / safe).cpu().tolist(),
    }


def _chunks(probs: torch.Tensor, labels: torch.Tensor):
    """``(p, onehot)`` fp64 column blocks of ``CLASS_CHUNK`` classes."""
    n, k = probs.shape
    rows = torch.arange(n, device=probs.device)
    for start in range(0, k, CLASS_CHUNK):
        p = probs[:, start : start + CLASS_CHUNK].double()
        onehot = torch.zeros_like(p)
        mine = (labels >= start) & (labels < start + p.shape[1])
        onehot[rows[mine], labels[mine] - start] = 1.0
        yield p, onehot


def static_calibration_error(
    probs: torch.Tensor, labels: torch.Tensor, n_bins: int = N_BINS
) -> float:
    """SCE (Nixon et al. 2019): class-wise ECE with equal-width bins, averaged over classes."""
    n, k = probs.shape
    slots = n_bins + 1  # torchmetrics' bins, p = 1 in a slot of its own
    edges = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64, device=probs.device)
    total = torch.zeros((), dtype=torch.float64, device=probs.device)
    for p, onehot in _chunks(probs, labels):
        bins = torch.bucketize(p, edges, right=True) - 1
        key = (torch.arange(p.shape[1], device=p.device) * slots).unsqueeze(0) + bins
        size = p.shape[1] * slots
        conf = torch.bincount(key.reshape(-1), p.reshape(-1), minlength=size)
        acc = torch.bincount(key.reshape(-1), onehot.reshape(-1), minlength=size)
        # |sum(acc) - sum(conf)| / N is n_bk/N * |acc(b,k) - conf(b,k)|; empty bins give 0.
        total += (acc - conf).abs().sum()
    return float(total / (n * k))


def adaptive_calibration_error(
    probs: torch.Tensor, labels: torch.Tensor, n_bins: int = N_BINS
) -> float:
    """ACE (Nixon et al. 2019): per class, ``n_bins`` equal-mass bins over sorted p_k."""
    n, k = probs.shape
    r = min(n_bins, n)
    # Position i of the sorted column goes to bin floor(i R / N): sizes differ by at most 1.
    bin_of = (torch.arange(n, device=probs.device) * r) // n
    size = torch.bincount(bin_of, minlength=r).double()
    total = torch.zeros((), dtype=torch.float64, device=probs.device)
    for p, onehot in _chunks(probs, labels):
        # Classes as rows: sorting along the contiguous axis is ~5x faster on a CPU.
        sorted_p, order = p.T.contiguous().sort(dim=1, stable=True)
        sorted_acc = onehot.T.contiguous().gather(1, order)
        conf = torch.zeros(p.shape[1], r, dtype=p.dtype, device=p.device)
        conf.index_add_(1, bin_of, sorted_p)
        acc = torch.zeros_like(conf).index_add_(1, bin_of, sorted_acc)
        total += ((acc - conf).abs() / size).sum()
    return float(total / (r * k))


def calibration_metrics(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = N_BINS) -> dict:
    """ECE, RMS-CE, MCE (top-1, torchmetrics), SCE, ACE (class-wise) and the reliability bins."""
    conf, correct = top1(probs, labels)
    return {
        **top1_calibration(conf, correct, n_bins),
        "sce": static_calibration_error(probs, labels, n_bins),
        "ace": adaptive_calibration_error(probs, labels, n_bins),
        "n_bins": n_bins,
        "reliability": reliability(conf, correct, n_bins),
    }
