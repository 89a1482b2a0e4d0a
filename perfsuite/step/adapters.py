"""Each method applied to a built model, inside the worker: a ``Losses`` pair of the
method's loss and the trivial loss its step is compared with (the loss share).

Patches change only the model instance (its ``forward``), as every library here
does when handed ``model=``; a worker builds a fresh model per case.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from perfsuite.method import Unavailable, Unsupported
from perfsuite.step.model import IGNORE_INDEX, eager_loss, trivial_loss
from perfsuite.step.presets import StepPreset

LossOf = Callable[[torch.Tensor], torch.Tensor]
TORCHTUNE_CHUNKS = 8


@dataclass
class Losses:
    """``loss(ids)``: the method's scalar loss of the batch; ``trivial(ids)``: the same
    model's decoder with a loss that costs nothing (compiled alike for torch-compile)."""

    loss: LossOf
    trivial: LossOf


def _plain_trivial(model: torch.nn.Module) -> LossOf:
    return lambda ids: trivial_loss(model, ids)


def _eager(model: torch.nn.Module, preset: StepPreset, beta: float) -> Losses:
    return Losses(lambda ids: eager_loss(model, ids, beta), _plain_trivial(model))


def _compiled(model: torch.nn.Module, preset: StepPreset, beta: float) -> Losses:
    loss = torch.compile(lambda ids: eager_loss(model, ids, beta))
    trivial = torch.compile(lambda ids: trivial_loss(model, ids))
    return Losses(loss, trivial)


def _ours(model: torch.nn.Module, preset: StepPreset, beta: float) -> Losses:
    from perfsuite.kernels import patch

    patch(model, label_smoothing=beta)  # softcap: the config's (Gemma2's 30)
    return Losses(lambda ids: model(input_ids=ids, labels=ids).loss, _plain_trivial(model))


def _liger(model: torch.nn.Module, preset: StepPreset, beta: float) -> Losses:
    try:
        from liger_kernel.transformers import monkey_patch
    except ImportError as err:
        raise Unavailable(f"liger_kernel failed to import: {err}") from err
    apply = getattr(monkey_patch, f"apply_liger_kernel_to_{preset.family}", None)
    if apply is None:
        raise Unavailable(f"this liger-kernel has no apply_liger_kernel_to_{preset.family}")
    if next(model.parameters()).device.type == "cpu":
        from perfsuite.baselines.liger import _check_interpreted

        _check_interpreted()
    # Only the fused linear cross-entropy: its RMSNorm, RoPE and MLP kernels would make
    # the step differ in more than the loss (and patch the module globally).
    switches = {
        name: name == "fused_linear_cross_entropy"
        for name, p in inspect.signature(apply).parameters.items()
        if isinstance(p.default, bool)
    }
    apply(model=model, **switches)
    extra = {"label_smoothing": beta} if beta else {}
    return Losses(lambda ids: model(input_ids=ids, labels=ids, **extra).loss, _plain_trivial(model))


def _cce(model: torch.nn.Module, preset: StepPreset, beta: float) -> Losses:
    if beta:
        raise Unsupported("CCE has no label smoothing")
    try:
        from cut_cross_entropy.transformers import cce_patch
    except ImportError as err:
        raise Unavailable(f"cut_cross_entropy.transformers.cce_patch: {err}") from err
    model = cce_patch(model, impl="cce", reduction="mean")
    return Losses(lambda ids: model(input_ids=ids, labels=ids).loss, _plain_trivial(model))


def _torchtune(model: torch.nn.Module, preset: StepPreset, beta: float) -> Losses:
    if beta or preset.softcap is not None:
        raise Unsupported("torchtune's chunked loss has neither label smoothing nor softcap")
    try:
        from torchtune.modules.loss import CEWithChunkedOutputLoss
    except ImportError as err:  # installed but broken (a torchao/torch mismatch)
        raise Unavailable(f"torchtune failed to import: {err}") from err
    criterion = CEWithChunkedOutputLoss(
        num_output_chunks=TORCHTUNE_CHUNKS, ignore_index=IGNORE_INDEX
    )

    def loss(ids: torch.Tensor) -> torch.Tensor:
        # TransformerDecoder.chunked_output: the head applied to sequence chunks.
        hidden = model.model(input_ids=ids).last_hidden_state
        chunks = [F.linear(h, model.lm_head.weight) for h in hidden.chunk(TORCHTUNE_CHUNKS, 1)]
        targets = F.pad(ids, (0, 1), value=IGNORE_INDEX)[..., 1:]
        return criterion(chunks, targets)

    return Losses(loss, _plain_trivial(model))


ADAPTERS: dict[str, Callable[[torch.nn.Module, StepPreset, float], Losses]] = {
    "eager": _eager,
    "torch-compile": _compiled,
    "ours": _ours,
    "liger": _liger,
    "cce": _cce,
    "torchtune-chunked": _torchtune,
}


def prepare(name: str, model: torch.nn.Module, preset: StepPreset, beta: float) -> Losses:
    """Apply method ``name`` to ``model`` (untimed); ``Unavailable``/``Unsupported``
    when it turns out it cannot run this case."""
    return ADAPTERS[name](model, preset, beta)
