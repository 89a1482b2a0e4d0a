"""Benchmark inputs: hidden states ``e``, classifier ``c`` and targets, seeded."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from perfsuite.method import Case


@dataclass
class Inputs:
    e: torch.Tensor  # (N, D), requires grad
    c: torch.Tensor  # (V, D), requires grad
    targets: torch.Tensor  # (N,) int64

    def clear_grads(self) -> None:
        self.e.grad = None
        self.c.grad = None


def make_inputs(case: Case, seed: int = 0) -> Inputs:
    """Random inputs with logits of unit scale, generated on the case's device.

    ``c`` is scaled by ``1/sqrt(D)`` so a logit has standard deviation about 1
    whatever the hidden size, like a trained model's head before training.
    """
    device = torch.device(case.device)
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = case.torch_dtype
    e = torch.randn(case.tokens, case.hidden, generator=gen, device=device, dtype=torch.float32)
    c = torch.randn(case.vocab, case.hidden, generator=gen, device=device, dtype=torch.float32)
    c /= case.hidden**0.5
    targets = torch.randint(0, case.vocab, (case.tokens,), generator=gen, device=device)
    return Inputs(
        e=e.to(dtype).requires_grad_(True),
        c=c.to(dtype).requires_grad_(True),
        targets=targets,
    )
