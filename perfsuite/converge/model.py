"""The tiny causal LM: a ``transformers`` Llama, randomly initialised, its loss taken
from the last hidden states and ``lm_head.weight`` as Liger's and CCE's patches do, for
every method alike."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

import torch

from perfsuite.converge.presets import Preset

LossFn = Any  # perfsuite.method.LossFn: (e, c, targets) -> scalar


def set_deterministic(seed: int) -> dict[str, Any]:
    """Seed everything and ask torch for deterministic kernels (cuBLAS's workspace before
    its first handle; Triton's kernels are outside torch's switch); returns what was set."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(seed)
    # use_deterministic_algorithms imports inductor's config (2-4 s a worker) to set this
    # variable's switch: a compiled method's first import of inductor reads it instead.
    os.environ.setdefault("TORCHINDUCTOR_DETERMINISTIC", "1")
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        torch._C._set_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return {
        "seed": seed,
        "torch.use_deterministic_algorithms": True,
        "tf32": False,
        "CUBLAS_WORKSPACE_CONFIG": os.environ["CUBLAS_WORKSPACE_CONFIG"],
    }


def llama_config(preset: Preset) -> Any:
    """A Llama config scaled down to the preset (eager attention: no SDPA backend choice)."""
    from transformers import LlamaConfig

    p = preset
    return LlamaConfig(
        vocab_size=p.vocab, hidden_size=p.hidden, intermediate_size=p.intermediate,
        num_hidden_layers=p.layers, num_attention_heads=p.heads, num_key_value_heads=p.heads,
        max_position_embeddings=max(p.seq, 64), tie_word_embeddings=False,
        attention_dropout=0.0, attn_implementation="eager",
    )  # fmt: skip


def build_model(preset: Preset, dtype: torch.dtype, device: str) -> torch.nn.Module:
    """``LlamaForCausalLM`` initialised from ``preset.seed``: the same weights every call."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(preset.seed)
    model = LlamaForCausalLM(llama_config(preset))
    return model.to(device=device, dtype=dtype).train()


# Logged while transformers imports torchao: the CUDA kernels it cannot load here
# ("Failed to load ..._C_mxfp8...so") and torch's pytree warning about its enums.
NOISY_LOGGERS = ("torchao", "torch.utils._pytree")


@contextlib.contextmanager
def quiet_imports() -> Iterator[None]:
    """Those loggers held to errors: noise in a dry run's plan, which imports transformers
    in the command's own process (a run's workers do it where their stderr is not shown)."""
    levels = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}
    try:
        for name in levels:
            logging.getLogger(name).setLevel(logging.ERROR)
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def describe_model(preset: Preset) -> dict[str, Any]:
    """The model's config and parameter count, built on the meta device (no memory)."""
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(llama_config(preset))
    cfg = model.config
    return {
        "class": type(model).__name__,
        "vocab": cfg.vocab_size,
        "hidden": cfg.hidden_size,
        "intermediate": cfg.intermediate_size,
        "layers": cfg.num_hidden_layers,
        "heads": cfg.num_attention_heads,
        "tied_embeddings": bool(cfg.tie_word_embeddings),
        "parameters": sum(p.numel() for p in model.parameters()),
    }


def hooked_loss(
    model: torch.nn.Module, loss_fn: LossFn, inputs: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """The patched forward: ``loss_fn(hidden, lm_head.weight, targets)`` over all tokens."""
    hidden = model.model(input_ids=inputs).last_hidden_state  # after the final norm
    e = hidden.reshape(-1, hidden.shape[-1])
    return loss_fn(e, model.lm_head.weight, targets.reshape(-1))
