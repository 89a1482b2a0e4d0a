"""Held-out evaluation: fp32 logits, plain cross-entropy (β = 0: runs with and without
smoothing share a scale), and the truth when the data's is known (docs/converge.md)."""

from __future__ import annotations

from typing import Any

import torch

from perfsuite.converge.calibration import N_BINS, calibration_metrics
from perfsuite.converge.data import BigramSource

EVAL_POSITIONS = 8192  # positions per held-out forward pass: 1 GiB of fp32 logits at V = 32k


@torch.no_grad()
def evaluate(
    model: torch.nn.Module, heldout: torch.Tensor, source: BigramSource | None, device: str
) -> dict[str, Any]:
    """Every held-out metric of ``model`` (module doc), from fp32 next-token probabilities
    of forward passes of up to ``EVAL_POSITIONS`` positions (the logits' memory)."""
    model.eval()  # the run's last use of the model
    weight, chunks = model.lm_head.weight.float(), []
    seqs = heldout.reshape(-1, heldout.shape[-1])
    rows = max(1, EVAL_POSITIONS // (seqs.shape[1] - 1))
    for start in range(0, seqs.shape[0], rows):
        batch = seqs[start : start + rows]
        hidden = model.model(input_ids=batch[:, :-1].to(device)).last_hidden_state.float()
        logits = hidden.reshape(-1, hidden.shape[-1]) @ weight.T
        chunks.append(torch.softmax(logits, dim=-1))
    probs = torch.cat(chunks)  # (positions, vocab)
    prev = heldout[:, :, :-1].reshape(-1).to(device)
    labels = heldout[:, :, 1:].reshape(-1).to(device)
    picked = probs.gather(1, labels.unsqueeze(1)).squeeze(1).double()
    loss = float(-picked.clamp_min(1e-300).log().mean())
    out = {
        "loss": loss,
        "perplexity": float(torch.tensor(loss).exp()),
        "accuracy": float((probs.argmax(dim=1) == labels).double().mean()),
        "positions": int(labels.numel()),
        **calibration_metrics(probs, labels),
    }
    if source is not None:  # KL(truth || model), the entropy floor, top-1 ECE vs the true p
        succ = source.successors.to(device)[prev]  # (positions, support)
        w = source.weights.to(device)[prev]
        p_model = probs.gather(1, succ).double().clamp_min(1e-300)
        conf, pred = probs.max(dim=1)
        conf = conf.double()
        true_p = (w * (succ == pred.unsqueeze(1))).sum(dim=1)
        edges = torch.linspace(0, 1, N_BINS + 1, dtype=conf.dtype, device=device)
        bins = torch.bucketize(conf, edges, right=True) - 1
        gap = torch.bincount(bins, true_p - conf, minlength=N_BINS + 1).abs().sum() / conf.numel()
        out.update(
            kl_to_truth=float((w * (w.log() - p_model.log())).sum(dim=1).mean()),
            entropy_floor=float(-(w * w.log()).sum(dim=1).mean()),
            ece_vs_truth=float(gap),
            true_top1_accuracy=float(w.max(dim=1).values.mean()),
        )
    return out
