"""The correctness gate of a step: the loss and every parameter's gradient against eager in
fp32, with ``perfsuite.run.correctness``'s tolerance rule and judge. ``grad_c`` is the
classifier's, ``grad_e`` the worst of the other parameters (reached through dE)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from perfsuite.run.correctness import Verdict, judge, tolerances
from perfsuite.step.model import eager_loss, reference_loss

Grads = dict[str, torch.Tensor]


def one_pass(
    model: torch.nn.Module,
    ids: torch.Tensor,
    loss_of: Callable[[torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, Grads]:
    """One forward and backward; returns the loss and the gradients, taken off the model."""
    model.zero_grad(set_to_none=True)
    loss = loss_of(ids)
    if loss.dim() != 0:
        raise ValueError(f"the loss must be a scalar, got shape {tuple(loss.shape)}")
    loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


@dataclass
class Reference:
    """Eager's fp32 loss and gradients, and the bound each quantity is judged by."""

    loss: torch.Tensor
    grads: Grads
    bounds: dict[str, float]
    head: str


def reference(model: torch.nn.Module, ids: torch.Tensor, beta: float, dtype: str) -> Reference:
    """The references of a model built in fp32; leaves it in ``dtype`` without gradients."""
    ref_loss = functools.partial(reference_loss, model, beta=beta)
    if dtype == "fp32":  # torch's error: fp64 against fp32
        model.double()  # exact: every fp32 value is an fp64 one, and back
        loss_t, grads_t = one_pass(model, ids, ref_loss)
        model.float()
        loss, grads = one_pass(model, ids, ref_loss)
    else:  # bf16 eager against fp32 on the same bf16 weights
        model.to(torch.bfloat16).float()
        loss, grads = one_pass(model, ids, ref_loss)
        model.to(torch.bfloat16)
        loss_t, grads_t = one_pass(model, ids, lambda x: eager_loss(model, x, beta))
    bounds = tolerances(dtype, {"loss": loss, **grads}, {"loss": loss_t, **grads_t})
    # lm_head.weight's name: the embedding's when they are tied
    head = next(name for name, p in model.named_parameters() if p is model.lm_head.weight)
    return Reference(loss=loss.float(), grads=grads, bounds=bounds, head=head)


def step_verdict(loss: torch.Tensor, grads: Grads, ref: Reference) -> Verdict:
    """``perfsuite.run.correctness.judge`` over the loss and every parameter's gradient;
    the row's ``grad_e`` is the decoder parameter that uses most of its bound."""
    full = judge({"loss": loss.float(), **grads}, {"loss": ref.loss, **ref.grads}, ref.bounds)
    # How much of its bound (never 0) each error uses; NaN: all of it.
    used = {n: full.errors[n] / ref.bounds[n] for n in ref.grads if n != ref.head}
    worst = max(used, key=lambda n: math.inf if math.isnan(used[n]) else used[n], default=ref.head)
    named = {"loss": "loss", "grad_e": worst, "grad_c": ref.head}
    errors = {q: full.errors[n] for q, n in named.items()}
    return replace(full, errors=errors, bounds={q: ref.bounds[n] for q, n in named.items()})
