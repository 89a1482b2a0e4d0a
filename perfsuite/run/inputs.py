"""Benchmark inputs: hidden states ``e``, classifier ``c`` and targets, seeded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from perfsuite.method import Case


@dataclass
class Inputs:
    e: torch.Tensor  # (N, D), requires grad
    c: torch.Tensor  # (V, D), requires grad
    targets: torch.Tensor  # (N,) int64
    # perfsuite.plan.workloads: the label rows carry, and the measured mean token
    # entropy (nats) of softmax(softcap(e @ c.T)).
    workload: str = "random"
    entropy: float | None = None

    def clear_grads(self) -> None:
        self.e.grad = None
        self.c.grad = None


def make_inputs(case: Case, seed: int = 0, workload: dict[str, Any] | None = None) -> Inputs:
    """Inputs on the case's device, with their measured mean entropy: random (``c`` scaled
    by ``1/sqrt(D)``: a logit's standard deviation about 1, a head before training), or
    the ``workload``'s (``perfsuite.plan.workloads``)."""
    from perfsuite.plan import workloads

    kind = (workload or {}).get("kind", "random")
    if kind == "synthetic":
        e, c, targets, _ = workloads.synthetic_inputs(
            case.tokens, case.vocab, case.hidden, entropy=workload["entropy"],
            zipf=workload["zipf"], softcap=case.softcap, seed=seed, device=case.device,
            geometry=workload.get("geometry", "trained"),
        )  # fmt: skip
    elif kind == "file":
        e, c, targets = workloads.file_inputs(case, workload)
    else:
        device = torch.device(case.device)
        gen = torch.Generator(device=device).manual_seed(seed)
        e = torch.randn(case.tokens, case.hidden, generator=gen, device=device, dtype=torch.float32)
        c = torch.randn(case.vocab, case.hidden, generator=gen, device=device, dtype=torch.float32)
        c /= case.hidden**0.5
        targets = torch.randint(0, case.vocab, (case.tokens,), generator=gen, device=device)
    e = e.to(case.torch_dtype).requires_grad_(True)
    c = c.to(case.torch_dtype).requires_grad_(True)
    entropy = workloads.mean_entropy(e, c, case.softcap, targets, case.ignore_index)
    return Inputs(e, c, targets, workloads.workload_label(workload), entropy)
