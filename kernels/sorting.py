"""Vocab sorting for the backward (as in Cut Cross-Entropy).

The forward accumulates each vocab entry's average logit; the backward visits
vocab tiles in that order, so entries with tiny probabilities share tiles and
whole tiles fall under the gradient filter instead of a few stragglers keeping
every tile alive.
"""

from __future__ import annotations

import torch


def vocab_order(logit_avg: torch.Tensor) -> torch.Tensor:
    """Vocab ids by decreasing average logit, int32 (V,): O(V) workspace."""
    return torch.argsort(logit_avg, descending=True).to(torch.int32)
