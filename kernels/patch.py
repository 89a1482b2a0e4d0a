"""``patch(model)``: a transformers causal LM trains on our loss in one line. The patched
``forward`` (an instance attribute; ``unpatch`` deletes it) hands the decoder's last hidden
states and ``lm_head.weight`` to ``linear_cross_entropy``; the rest (label shift, softcap,
output) is the model's own, but an all-ignored batch has loss 0, not NaN. Classes outside
``TESTED`` need ``allow_untested=True``: one that rescales its logits (Cohere's
``logit_scale``) would silently lose that.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .api import linear_cross_entropy

TESTED = frozenset(
    "LlamaForCausalLM MistralForCausalLM Qwen2ForCausalLM Qwen3ForCausalLM GemmaForCausalLM "
    "Gemma2ForCausalLM Gemma3ForCausalLM Phi3ForCausalLM".split()
)
# The original forward's parameters the patched one routes: the decoder's, then ours.
DECODER_ARGS = frozenset(
    "input_ids attention_mask position_ids cache past_key_values inputs_embeds use_cache "
    "output_attentions output_hidden_states cache_position".split()
)
OWN_ARGS = frozenset({"labels", "logits_to_keep", "num_logits_to_keep", "return_dict"})
# linear_cross_entropy's options a patch may set; reduction is the model's, the rest
# (return_lse, vocab_parallel) change what the loss is.
KERNEL_OPTIONS = frozenset({"weight", "memory_budget", "engine", "impl"})


class UnsupportedModelError(ValueError):
    """The model lacks what the patched forward relies on; the message names it."""


def patch(
    model: torch.nn.Module,
    *,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    softcap: float | str | None = "config",
    ignore_index: int = -100,
    return_logits: bool | None = None,
    allow_untested: bool = False,
    **kernel_options: Any,
) -> torch.nn.Module:
    """Make ``model(input_ids, labels=...)`` compute its loss with ``linear_cross_entropy``
    and return the model; ``UnsupportedModelError`` names what a model lacks.

    Args:
        model: a transformers ``*ForCausalLM``, not yet compiled (a patched one gets
            the new options).
        label_smoothing, z_loss: the kernel's β and z-loss coefficient.
        softcap: ``"config"`` (``final_logit_softcapping``), a float, or None; it caps
            the loss's logits and any returned logits alike.
        ignore_index: the label that is ignored, and the one the shift pads with.
        return_logits: with labels, also return the logits: True, False, or None (only
            when not training, as the Trainer's evaluation wants). Without labels they
            are always returned (``generate()`` is unchanged); a call may pass its own.
        allow_untested: patch a class outside ``TESTED``.
        kernel_options: any of ``KERNEL_OPTIONS`` (engine "auto": the torch engine for
            CPU tensors).
    """
    original = _check_model(model, allow_untested)
    cap = getattr(model.config, "final_logit_softcapping", None) if softcap == "config" else softcap
    unknown = sorted(set(kernel_options) - KERNEL_OPTIONS)
    if unknown:
        raise TypeError(
            f"patch() got unknown kernel options {unknown}; use {sorted(KERNEL_OPTIONS)}"
        )
    if return_logits not in (None, True, False):
        raise TypeError(f"return_logits must be True, False or None, got {return_logits!r}")
    kernel = dict(kernel_options, label_smoothing=label_smoothing, z_loss=z_loss)
    kernel.update(ignore_index=ignore_index, softcap=None if cap is None else float(cap))
    # The kernel's own errors, now, not mid-training: every call's check, on no rows.
    c = model.lm_head.weight.detach()
    with torch.no_grad():
        empty = torch.zeros(0, dtype=torch.long, device=c.device)
        linear_cross_entropy(c.new_zeros(0, c.shape[1]), c, empty, **_for_device(kernel, c.device))
    state = _state(model, original, kernel, return_logits)
    unpatch(model)
    model.forward = types.MethodType(_patched_forward(original, state), model)
    return model


def unpatch(model: torch.nn.Module) -> torch.nn.Module:
    """Restore the class's ``forward`` on a patched model (a no-op on any other)."""
    if patched(model):
        del model.forward
    elif hasattr(_function(model), "perfsuite_patch"):  # functools.wraps copied it
        raise UnsupportedModelError(
            "model.forward was wrapped after patch() (accelerate, peft?): unwrap it first"
        )
    return model


def patched(model: torch.nn.Module) -> bool:
    """Whether ``model.forward`` is this module's patch, not a wrapper around it."""
    function = _function(model)
    return hasattr(function, "perfsuite_patch") and not hasattr(function, "__wrapped__")


def _function(model: torch.nn.Module) -> object:
    """The function behind an instance-level ``forward``; None without one."""
    forward = model.__dict__.get("forward")
    return getattr(forward, "__func__", forward)


@dataclass(frozen=True)
class _State:
    """What a patched forward needs, resolved once at patch time."""

    kernel: dict[str, Any]
    return_logits: bool | None
    positional: tuple[str, ...]  # the original forward's positional names, self excluded
    decoder_return_dict: bool  # old API: return_dict is a named parameter; ask for outputs
    output: type
    cache_field: str
    keep: Callable[[torch.Tensor, Any], torch.Tensor]


def _check_model(model: object, allow_untested: bool) -> Callable:
    """The class's forward, once the model is shown to be one the patch can run."""
    if hasattr(model, "_orig_mod"):
        raise UnsupportedModelError(
            "the model is already torch.compile-d: patch(model) first, then torch.compile it"
        )
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise UnsupportedModelError(
            f"patch() takes a transformers causal LM, got {type(model).__name__}"
        )
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    name = type(model).__name__
    causal: set[str] = set()
    for value in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        causal.update([value] if isinstance(value, str) else value)
    if not any(cls.__name__ in causal for cls in type(model).__mro__):
        raise UnsupportedModelError(
            f"{name} is not a causal LM (no class in its MRO is in transformers' "
            "MODEL_FOR_CAUSAL_LM_MAPPING): patch the *ForCausalLM model that holds it"
        )
    head = getattr(model, "lm_head", None)
    if not isinstance(head, torch.nn.Linear):
        found = "" if head is None else f" (its lm_head is a {type(head).__name__})"
        raise UnsupportedModelError(
            f"{name} has no lm_head nn.Linear{found}: the loss needs lm_head.weight"
        )
    if head.bias is not None:
        raise UnsupportedModelError(
            f"{name}.lm_head has a bias: the kernel computes hidden @ weight.T without one"
        )
    if not isinstance(getattr(model, "model", None), torch.nn.Module):
        raise UnsupportedModelError(
            f"{name} has no .model decoder: the patched forward runs model.model(...)"
        )
    original = type(model).forward
    params = inspect.signature(original).parameters
    named = {p.name for p in list(params.values())[1:] if p.kind != p.VAR_KEYWORD}
    strange = sorted(named - DECODER_ARGS - OWN_ARGS)
    if strange or "labels" not in named or "input_ids" not in named:
        raise UnsupportedModelError(
            f"unknown forward signature for {name}: parameters {strange} are not routed"
            if strange
            else f"unknown forward signature for {name}: it takes no input_ids or labels"
        )
    if "forward" in model.__dict__ and not patched(model):
        raise UnsupportedModelError(
            f"{name}.forward is already replaced on this instance (accelerate, peft, "
            "another patch?): patch the model before wrapping it"
        )
    owner = next(c for c in type(model).__mro__ if "forward" in c.__dict__).__name__
    if owner not in TESTED and not allow_untested:
        raise UnsupportedModelError(
            f"{owner}.forward is untested with the patch, which keeps only lm_head and "
            "final_logit_softcapping of what it does after the decoder: check that is all "
            "and pass allow_untested=True"
        )
    return original


def _for_device(kernel: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """baselines/ours.py's engine choice: the slice backward runs natively on a CPU
    (whatever TRITON_INTERPRET says), as Triton on CUDA."""
    if device.type == "cpu" and kernel.get("engine", "auto") == "auto":
        return {**kernel, "engine": "torch"}
    return kernel


def _state(
    model: torch.nn.Module, original: Callable, kernel: dict[str, Any], return_logits: bool | None
) -> _State:
    from transformers.modeling_outputs import CausalLMOutputWithPast

    try:
        from transformers.modeling_utils import slice_logits_to_keep as keep
    except ImportError:  # before transformers 5
        keep = _keep_last
    params = list(inspect.signature(original).parameters.values())[1:]
    positional = tuple(
        p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    )
    fields = CausalLMOutputWithPast.__dataclass_fields__
    return _State(
        kernel=kernel,
        return_logits=return_logits,
        positional=positional,
        decoder_return_dict="return_dict" in positional,
        output=CausalLMOutputWithPast,
        cache_field="cache" if "cache" in fields else "past_key_values",
        keep=keep,
    )


def _keep_last(hidden: torch.Tensor, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
    rows = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
    return hidden[:, rows, :]


def _patched_forward(original: Callable, state: _State) -> Callable:
    """A function named ``forward`` with the original's signature (generate() and the
    Trainer read it) and no ``__wrapped__`` (accelerate would unwrap the patch away)."""

    def forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        return _forward(self, state, args, kwargs)

    forward.__qualname__ = f"{original.__qualname__} (perfsuite.kernels.patch)"
    forward.__doc__ = original.__doc__
    forward.__signature__ = inspect.signature(original)  # type: ignore[attr-defined]
    forward.perfsuite_patch = state  # type: ignore[attr-defined]
    return forward


def _forward(model: Any, state: _State, args: tuple, kwargs: dict[str, Any]) -> Any:
    """The original forward, with the loss computed from the hidden states."""
    if len(args) > len(state.positional):
        raise TypeError(f"forward() takes at most {len(state.positional)} positional arguments")
    inputs = dict(zip(state.positional[: len(args)], args, strict=True))
    for name in kwargs:
        if name in inputs:
            raise TypeError(f"forward() got multiple values for argument {name!r}")
    inputs.update(kwargs)
    labels = inputs.pop("labels", None)
    keep = inputs.pop("num_logits_to_keep", 0)
    keep = inputs.pop("logits_to_keep", keep)
    shift_labels = inputs.pop("shift_labels", None)
    num_items = inputs.pop("num_items_in_batch", None)
    return_logits = inputs.pop("return_logits", state.return_logits)
    return_dict = inputs.pop("return_dict", None)
    if return_dict is None:
        return_dict = getattr(model.config, "return_dict", True)
    if state.decoder_return_dict:
        inputs["return_dict"] = True
    outputs = model.model(**inputs)
    hidden = state.keep(outputs[0], keep)
    targets = _targets(labels, shift_labels, hidden, state.kernel["ignore_index"])
    loss = None if targets is None else _loss(model, state, hidden, targets, num_items)
    wanted = targets is None or (not model.training if return_logits is None else return_logits)
    logits = model.lm_head(hidden) if wanted else None
    cap = state.kernel["softcap"]
    if logits is not None and cap is not None:  # Gemma2's softcap, in its order of operations
        logits = torch.tanh(logits / cap) * cap
    out = state.output(
        loss=loss,
        logits=logits,
        hidden_states=getattr(outputs, "hidden_states", None),
        attentions=getattr(outputs, "attentions", None),
        **{state.cache_field: getattr(outputs, state.cache_field, None)},
    )
    return out if return_dict else out.to_tuple()


def _targets(
    labels: torch.Tensor | None,
    shift_labels: torch.Tensor | None,
    hidden: torch.Tensor,
    ignore_index: int,
) -> torch.Tensor | None:
    """transformers' ForCausalLMLoss shift: position t predicts labels[t + 1]."""
    if shift_labels is None:
        if labels is None:
            return None
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    if shift_labels.shape != hidden.shape[:-1]:
        raise ValueError(
            f"labels of shape {tuple(shift_labels.shape)} do not match the kept positions "
            f"{tuple(hidden.shape[:-1])} (logits_to_keep keeps a subset)"
        )
    return shift_labels


def _loss(
    model: Any,
    state: _State,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    num_items: torch.Tensor | int | None,
) -> torch.Tensor:
    """The mean over valid labels, or their sum over ``num_items_in_batch`` (fp32)."""
    c = model.lm_head.weight
    e, targets = hidden.to(c.device), targets.to(c.device)  # a model split over devices
    if torch.is_autocast_enabled(c.device.type):  # as lm_head would run under autocast
        dtype = torch.get_autocast_dtype(c.device.type)
        e, c = e.to(dtype), c.to(dtype)
    kernel = _for_device(state.kernel, e.device)
    reduction = "mean" if num_items is None else "sum"
    loss = linear_cross_entropy(e, c, targets, reduction=reduction, **kernel)
    if num_items is None:
        return loss
    if isinstance(num_items, torch.Tensor):
        num_items = num_items.to(loss.device)
    return loss / num_items
