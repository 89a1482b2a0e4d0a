"""Where the synthetic workload puts its unigram prior in hidden space: along a seeded
unit vector holding ``TRAINED_SHARE_C`` of C's norm, as in a trained dump (``"trained"``),
or along hidden dimension 0 (``"axis"``)."""

from __future__ import annotations

import math
from typing import Any

import torch

# share_c of reports/filtering/trained-v16k.safetensors (tests/plan/test_geometry.py).
TRAINED_SHARE_C = 0.381


def embed(
    structure: torch.Tensor,
    body: torch.Tensor,
    log_prior: torch.Tensor,
    a: float,
    gamma: float,
    *,
    geometry: str = "trained",
    seed: int = 0,
    centre: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """``(e, c, info)`` with ``e @ c.T = a·structure @ body.T + γ·log π`` up to a constant
    per row (which no softmax sees). ``structure`` (N, D-1), ``body`` (V, D-1)."""
    tokens, hidden = structure.shape[0], body.shape[1] + 1
    if geometry == "axis":
        e = torch.cat([torch.full((tokens, 1), float(gamma)), a * structure], dim=1)
        c = torch.cat([log_prior[:, None], body], dim=1)
        return e, c, {"geometry": "axis"}
    gen = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(hidden, hidden, generator=gen, dtype=torch.float64))
    q = (q * torch.sign(torch.diagonal(r))[None, :]).float()  # a unique, seeded basis
    u, rest = q[:, 0], q[:, 1:]  # a unit vector and an orthonormal basis of its complement
    part = a * structure
    mean = part.mean(0)
    # Centred rows keep E's mean on u; the mean's logit term joins the prior (per vocab).
    # Without a softcap the prior's constant part (a shift of every logit of a row, which
    # no softmax sees) is dropped too; with one, logits stay exactly the axis geometry's.
    q = gamma * log_prior + body @ mean
    if centre:
        q = q - q.mean()
    body_norm, q_norm = float(body.norm()), float(q.norm())
    odds = TRAINED_SHARE_C**2 / (1 - TRAINED_SHARE_C**2)
    g = q_norm / (body_norm * math.sqrt(odds)) if q_norm > 0 and body_norm > 0 else 1.0
    e = g * u[None, :] + (part - mean) @ rest.T
    c = (q / g)[:, None] * u[None, :] + body @ rest.T
    ef = e.norm()
    share_e = float(math.sqrt(tokens) * g / ef) if ef > 0 else 0.0
    return e, c, {"geometry": "trained", "share_c": TRAINED_SHARE_C, "share_e": share_e}
