"""Calibration metrics against a hand-worked example (4 samples, 3 classes, 15 bins).

    sample  p(class 0, 1, 2)     label  top-1 conf (15ths bin)  correct
    s0      0.90  0.05  0.05     0      0.90 (13)               yes
    s1      0.62  0.30  0.08     1      0.62 (9)                no
    s2      0.21  0.69  0.10     1      0.69 (10)               yes
    s3      0.24  0.04  0.72     0      0.72 (10)               no

Top-1 bins: 13 {0.90, acc 1}: gap 0.10; 9 {0.62, acc 0}: gap 0.62;
10 {0.69, 0.72; acc 1/2}: gap |0.5 - 0.705| = 0.205.
ECE = 1/4 0.10 + 1/4 0.62 + 2/4 0.205 = 0.2825; MCE = 0.62;
RMS = sqrt(1/4 0.10^2 + 1/4 0.62^2 + 2/4 0.205^2).

SCE, class by class (|sum labels - sum p| per bin, over N K = 12):
class 0: 0.90 (13, y 1): 0.10; 0.62 (9, y 0): 0.62; 0.21 and 0.24 share bin 3
(y 0, 1): |1 - 0.45| = 0.55 -> 1.27. class 1: 0.05 and 0.04 share bin 0 (y 0, 0):
0.09; 0.30 (4, y 1): 0.70; 0.69 (10, y 1): 0.31 -> 1.10. class 2 (no label):
0.05 + (0.08 + 0.10 in bin 1) + 0.72 -> 0.95. SCE = 3.32 / 12.

ACE with 2 equal-mass bins (2 samples each), per class sorted by p:
class 0: (0.21 y0, 0.24 y1) |0.5 - 0.225| = 0.275; (0.62 y0, 0.90 y1) |0.5 - 0.76| = 0.26.
class 1: (0.04, 0.05; y 0, 0) 0.045; (0.30, 0.69; y 1, 1) |1 - 0.495| = 0.505.
class 2: (0.05, 0.08) 0.065; (0.10, 0.72) 0.41. ACE = 1.56 / 6 = 0.26.
"""

from __future__ import annotations

import math

import pytest
import torch

from perfsuite.converge import calibration
from perfsuite.converge.calibration import (
    adaptive_calibration_error,
    calibration_metrics,
    reliability,
    static_calibration_error,
    top1,
    top1_calibration,
)

PROBS = torch.tensor(
    [[0.90, 0.05, 0.05], [0.62, 0.30, 0.08], [0.21, 0.69, 0.10], [0.24, 0.04, 0.72]],
    dtype=torch.float64,
)
LABELS = torch.tensor([0, 1, 1, 0])


def test_every_metric_of_the_example_by_hand():
    # torchmetrics bins in fp32 whatever the input's dtype: agreement to fp32's precision.
    got = top1_calibration(*top1(PROBS, LABELS))
    assert got["ece"] == pytest.approx(0.2825, abs=1e-6)
    assert got["mce"] == pytest.approx(0.62, abs=1e-6)
    rms = math.sqrt(0.25 * 0.10**2 + 0.25 * 0.62**2 + 0.5 * 0.205**2)
    assert got["rms_ce"] == pytest.approx(rms, abs=1e-6)
    assert static_calibration_error(PROBS, LABELS) == pytest.approx(3.32 / 12, abs=1e-12)
    assert adaptive_calibration_error(PROBS, LABELS, n_bins=2) == pytest.approx(0.26, abs=1e-12)
    bins = reliability(*top1(PROBS, LABELS))
    assert [i for i, c in enumerate(bins["count"]) if c] == [9, 10, 13]
    assert bins["count"][10] == 2 and bins["accuracy"][10] == 0.5
    assert bins["confidence"][10] == pytest.approx(0.705, abs=1e-12)
    # The count-weighted gap over the bins is the ECE.
    gaps = zip(bins["count"], bins["accuracy"], bins["confidence"], strict=True)
    ece = sum(c / 4 * abs(a - f) for c, a, f in gaps)
    assert ece == pytest.approx(0.2825, abs=1e-12)


def test_ace_with_one_sample_per_bin_is_the_mean_absolute_gap():
    # 15 bins over 4 samples: 4 bins of one, so ACE = mean |onehot - p| over N K.
    onehot = torch.nn.functional.one_hot(LABELS, 3).double()
    expected = float((onehot - PROBS).abs().mean())
    assert adaptive_calibration_error(PROBS, LABELS) == pytest.approx(expected, abs=1e-12)


def test_perfectly_calibrated_source_scores_near_zero():
    # Labels drawn from the predicted distributions themselves: every metric -> 0.
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(20000, 5, generator=gen, dtype=torch.float64) * 2
    probs = logits.softmax(dim=1)
    labels = torch.multinomial(probs, 1, generator=gen).squeeze(1)
    got = calibration_metrics(probs, labels)
    assert got["ece"] < 0.02 and got["rms_ce"] < 0.03
    assert got["sce"] < 0.01 and got["ace"] < 0.01
    # Confidently wrong predictions score far worse.
    wrong = calibration_metrics(probs, (probs.argmax(dim=1) + 1) % 5)
    assert wrong["ece"] > 0.3 and wrong["sce"] > 5 * got["sce"] and wrong["ace"] > 5 * got["ace"]


def test_top1_route_equals_torchmetrics_multiclass():
    """ECE/RMS/MCE from (top-1 confidence, hit) through binary_calibration_error are
    torchmetrics' multiclass_calibration_error on the full distribution."""
    from torchmetrics.functional.classification import multiclass_calibration_error

    gen = torch.Generator().manual_seed(1)
    probs = (torch.randn(3000, 7, generator=gen) * 2).softmax(dim=1)
    labels = torch.randint(0, 7, (3000,), generator=gen)
    got = top1_calibration(*top1(probs, labels))
    for name, norm in (("ece", "l1"), ("rms_ce", "l2"), ("mce", "max")):
        ref = multiclass_calibration_error(probs, labels, num_classes=7, n_bins=15, norm=norm)
        assert got[name] == pytest.approx(float(ref), abs=1e-6), name


def test_class_chunks_do_not_change_sce_or_ace(monkeypatch: pytest.MonkeyPatch):
    gen = torch.Generator().manual_seed(2)
    probs = (torch.randn(500, 37, generator=gen) * 3).softmax(dim=1)
    labels = torch.randint(0, 37, (500,), generator=gen)
    whole = (static_calibration_error(probs, labels), adaptive_calibration_error(probs, labels))
    monkeypatch.setattr(calibration, "CLASS_CHUNK", 5)  # 8 chunks, the last one short
    chunked = (static_calibration_error(probs, labels), adaptive_calibration_error(probs, labels))
    assert chunked == pytest.approx(whole, abs=1e-12)
