"""Held-out evaluation: loss, perplexity, accuracy, calibration, distance to the truth.

The logits are computed in fp32 from the final weights for every method alike
(the method only ever computed training losses), and the held-out loss is the
plain cross-entropy (beta = 0) so that runs trained with and without smoothing
are scored on the same scale. Since the source's ``P(next | prev)`` is known,
three numbers compare the model with the truth rather than with sampled labels:
the mean KL(truth || model), the entropy floor (the loss a perfect model would
get on these positions), and ECE against the truth (binned top-1 confidence vs
the true probability of the predicted token, not the 0/1 hit).
"""

from __future__ import annotations

from typing import Any

import torch

from perfsuite.converge.calibration import N_BINS, calibration_metrics
from perfsuite.converge.data import BigramSource
from perfsuite.converge.model import hidden_states


@torch.no_grad()
def predictive_probs(model: torch.nn.Module, heldout: torch.Tensor, device: str) -> torch.Tensor:
    """``(positions, vocab)`` fp64 next-token probabilities over every held-out batch."""
    was_training = model.training
    model.eval()
    out = []
    weight = model.lm_head.weight.float()
    for batch in heldout:
        hidden = hidden_states(model, batch[:, :-1].to(device)).float()
        logits = hidden.reshape(-1, hidden.shape[-1]) @ weight.T
        out.append(torch.softmax(logits.double(), dim=-1).cpu())
    model.train(was_training)
    return torch.cat(out)


def truth_metrics(
    probs: torch.Tensor, prev: torch.Tensor, source: BigramSource, n_bins: int = N_BINS
) -> dict[str, float]:
    """KL(truth || model), the entropy floor and top-1 ECE against the true probabilities."""
    truth = source.transition[prev]  # (positions, vocab), float64
    safe_log = torch.where(truth > 0, truth.log(), torch.zeros_like(truth))
    entropy = -(truth * safe_log).sum(dim=1)
    kl = (truth * (safe_log - probs.clamp_min(1e-300).log())).sum(dim=1)
    conf, pred = probs.max(dim=1)
    true_p = truth.gather(1, pred.unsqueeze(1)).squeeze(1)
    edges = torch.linspace(0, 1, n_bins + 1, dtype=conf.dtype)
    bins = torch.bucketize(conf, edges, right=True) - 1
    gap = torch.bincount(bins, true_p - conf, minlength=n_bins + 1).abs().sum() / conf.numel()
    return {
        "kl_to_truth": float(kl.mean()),
        "entropy_floor": float(entropy.mean()),
        "ece_vs_truth": float(gap),
        "true_top1_accuracy": float(truth.max(dim=1).values.mean()),
    }


def evaluate(
    model: torch.nn.Module, heldout: torch.Tensor, source: BigramSource, device: str
) -> dict[str, Any]:
    """Every held-out metric of ``model`` (see the module docstring)."""
    probs = predictive_probs(model, heldout, device)
    prev = heldout[:, :, :-1].reshape(-1)
    labels = heldout[:, :, 1:].reshape(-1)
    picked = probs.gather(1, labels.unsqueeze(1)).squeeze(1)
    loss = float(-picked.clamp_min(1e-300).log().mean())
    return {
        "loss": loss,
        "perplexity": float(torch.tensor(loss).exp()),
        "accuracy": float((probs.argmax(dim=1) == labels).double().mean()),
        "positions": int(labels.numel()),
        **calibration_metrics(probs, labels),
        **truth_metrics(probs, prev, source),
    }
