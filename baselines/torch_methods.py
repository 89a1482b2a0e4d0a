"""Methods built from torch alone: the fp32 reference, eager, torch.compile, torch-native;
eager in a step is the model's ``forward(labels=...)``, and across ranks the shard logits
all-gathered to the full N x V, then eager's loss on them (the naive baseline)."""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from perfsuite import method as _method
from perfsuite.method import Capabilities, Case, Holds, LossFn, SimpleMethod, class_weights
from perfsuite.tp_method import Shard, SumGradOver, check_layout, shard_ranges

# Every option: on materialised logits each training term is a line of torch.
FULL = dict(label_smoothing=True, softcap=True, z_loss=True, class_weights=True)


def softcapped(logits: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """Gemma2's logit softcap ``s * tanh(l / s)``; identity without one."""
    return logits if softcap is None else softcap * torch.tanh(logits / softcap)


def cross_entropy_terms(
    logits: torch.Tensor,
    targets: torch.Tensor,
    beta: float = 0.0,
    ignore_index: int = -100,
    reduction: str = "mean",
    weight: torch.Tensor | None = None,
    z_loss: float = 0.0,
) -> torch.Tensor:
    """``F.cross_entropy`` (``mean`` or ``sum``) on materialised logits plus ``z_loss·lse²``
    per valid row (mean over the valid rows for ``mean``, unweighted: kernels/terms.py's)."""
    w = None if weight is None else weight.to(logits.dtype)
    loss = F.cross_entropy(
        logits, targets, weight=w, label_smoothing=beta, ignore_index=ignore_index,
        reduction=reduction,
    )  # fmt: skip
    if not z_loss:
        return loss
    valid = targets != ignore_index
    total = torch.where(valid, z_loss * torch.logsumexp(logits, -1).float().square(), 0.0).sum()
    return loss + (total / valid.sum() if reduction == "mean" else total)


def eager_loss(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    beta: float = 0.0,
    softcap: float | None = None,
    ignore_index: int = -100,
    weight: torch.Tensor | None = None,
    z_loss: float = 0.0,
) -> torch.Tensor:
    """The paper's "Baseline": logits in the input dtype, then ``F.cross_entropy``."""
    logits = softcapped(e @ c.T, softcap)
    return cross_entropy_terms(logits, targets, beta, ignore_index, "mean", weight, z_loss)


def reference_loss(e: torch.Tensor, c: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """The yardstick: eager's loss (same arguments) on fp32 materialised logits."""
    return eager_loss(e.float(), c.float(), *args, **kwargs)


def case_loss(
    fn, case: Case, e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """``fn`` (reference_loss or eager_loss) with every option of ``case``."""
    return fn(
        e, c, targets, case.beta, case.softcap, case.ignore_index,
        weight=class_weights(case, e.device), z_loss=case.z_loss,
    )  # fmt: skip


def _build_compiled(case: Case, c: torch.Tensor) -> LossFn:
    # beta, softcap and z-loss are bound as Python constants, as a training loop would.
    compiled = torch.compile(eager_loss, dynamic=False)
    return functools.partial(
        compiled, beta=case.beta, softcap=case.softcap, ignore_index=case.ignore_index,
        weight=class_weights(case, c.device), z_loss=case.z_loss,
    )  # fmt: skip


def _patch_eager(model: torch.nn.Module, preset: object, beta: float):
    from perfsuite.step.model import eager_loss as model_loss

    return lambda ids: model_loss(model, ids, beta)


def _patch_compiled(model: torch.nn.Module, preset: object, beta: float):
    return torch.compile(_patch_eager(model, preset, beta))


def _native_check(device: str) -> str | None:
    if not hasattr(F, "linear_cross_entropy") or not hasattr(torch.nn, "LinearCrossEntropyOptions"):
        return f"torch {torch.__version__} has no F.linear_cross_entropy (new in torch 2.13)"
    return None


def _build_native(case: Case, c: torch.Tensor) -> LossFn:
    # At beta > 0 torch falls back to full logits (with a warning): that is what it does,
    # and what we measure.
    return functools.partial(
        F.linear_cross_entropy, ignore_index=case.ignore_index, label_smoothing=case.beta,
        options=torch.nn.LinearCrossEntropyOptions(),
    )  # fmt: skip


class _GatherColumns(torch.autograd.Function):
    """All-gather the shard logits along V; the backward keeps this shard's columns: every
    rank computes the same loss from the same logits (a reduce-scatter would count it K
    times)."""

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor, shard: Shard) -> torch.Tensor:
        ranges = shard_ranges(shard.vocab, shard.world)
        width = max(stop - start for start, stop in ranges)
        padded = F.pad(local, (0, width - local.shape[1])).contiguous()
        parts = [torch.empty_like(padded) for _ in ranges]
        dist.all_gather(parts, padded, group=shard.group)
        ctx.span = (shard.start, shard.stop)
        columns = [p[:, : stop - start] for p, (start, stop) in zip(parts, ranges, strict=True)]
        return torch.cat(columns, 1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        start, stop = ctx.span
        return grad[:, start:stop].contiguous(), None


def _build_eager_tp(case: Case, c_shard: torch.Tensor, shard: Shard) -> LossFn:
    check_layout(shard)
    weight = class_weights(case, c_shard.device)

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = _GatherColumns.apply(SumGradOver.apply(e, shard.group) @ c.T, shard)
        # Single-device eager on the gathered logits: same dtype, same ops, same terms.
        return cross_entropy_terms(
            softcapped(logits, case.softcap), targets, case.beta, case.ignore_index,
            "mean", weight, case.z_loss,
        )  # fmt: skip

    return loss_fn


def _build_reordered(case: Case, c: torch.Tensor) -> LossFn:
    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        half = e.shape[0] // 2
        args = (case.beta, case.ignore_index, "sum")
        total = sum(
            cross_entropy_terms(e[h] @ c.T, targets[h], *args, z_loss=case.z_loss)
            for h in (slice(0, half), slice(half, None))
        )
        return total / (targets != case.ignore_index).sum()

    return loss_fn


# Its loss is the gate's torch error in bf16/fp16 (its memory counts in ``gate_bytes``).
EAGER = SimpleMethod(
    name="eager",
    description="F.cross_entropy on e @ c.T in the input dtype (paper's Baseline)",
    build=lambda case, c: functools.partial(case_loss, eager_loss, case),
    caps=Capabilities(**FULL),
    paper="torch_eager",
    tp=_method.AcrossRanks(
        _build_eager_tp,
        "shard logits in the input dtype all-gathered to N x V, then eager's "
        "F.cross_entropy (the naive baseline)",
    ),
    step=_method.StepPatch(_patch_eager),
)

METHODS = [
    SimpleMethod(
        name="reference",
        description="fp32 materialised logits + F.cross_entropy (the yardstick)",
        build=lambda case, c: functools.partial(case_loss, reference_loss, case),
        caps=Capabilities(**FULL),
        timed_by_default=False,
    ),
    EAGER,
    SimpleMethod(
        name="eager-reordered",
        description="eager with the loss summed over two halves of the tokens (another "
        "rounding: converge's yardstick of eager's own noise in fp32)",
        build=_build_reordered,
        caps=Capabilities(label_smoothing=True, z_loss=True),
        timed_by_default=False,
    ),
    SimpleMethod(
        name="torch-compile",
        description="eager under torch.compile (compiled before timing; a step compiles "
        "the whole model and its loss on the first step, measured once: compile_ms)",
        build=_build_compiled,
        caps=Capabilities(**FULL, holds=Holds("compiled", (2.0, 4.0))),
        compiles=True,
        paper="torch_compile",
        step=_method.StepPatch(_patch_compiled),
    ),
    SimpleMethod(
        name="torch-native",
        description="F.linear_cross_entropy with LinearCrossEntropyOptions() (chunked; "
        "full logits when beta > 0)",
        build=_build_native,
        caps=Capabilities(
            label_smoothing=True,
            grads_in_forward=True,
            holds=Holds("none"),
            smoothing_falls_back=True,
        ),
        extra_check=_native_check,
    ),
]
