"""Write a ``--workload FILE`` dump from any ``transformers`` causal LM and a batch of text.

Our tables came from inputs we designed; what gradient filtering does depends on a
real model's hidden states. ``dump_workload`` runs the model once on token ids,
catches the input of its output embedding (``model.get_output_embeddings()``: the
hidden states right before the classifier, after the final norm) with a forward
pre-hook, and writes what ``perfsuite run --workload FILE`` reads:

- ``e``: (N, D) those hidden states, one row per predicting position;
- ``c``: (V, D) the classifier's weight;
- ``targets``: (N,) the next token of each position (``-100`` where the next
  position is padding, as ``attention_mask`` says), the last position of each
  sequence left out (it predicts nothing in the batch);
- ``softcap`` (metadata) when the config has a final logit softcap (Gemma2).

A hook, not ``output_hidden_states``: some models (Gemma) scale or norm between the
last decoder layer and the head, and the hook sees exactly what the head sees.
The file is read back through ``perfsuite.plan.workloads.read_dump`` before this
returns, so a dump that would fail ``run`` fails here, with its one-line reason.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from perfsuite.plan.workloads import WorkloadError, read_dump

IGNORE = -100
DUMP_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def capture(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, float | None]:
    """``(hidden, weight, softcap)``: what the classifier is fed on ``input_ids`` (B, T).

    ``hidden`` is (B, T, D) as the head sees it; ``weight`` is the head's (V, D).
    A head with a bias is refused: the loss we benchmark has none.
    """
    head = model.get_output_embeddings()
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
        raise WorkloadError(f"{type(model).__name__} has no output embedding (lm_head) to hook")
    if getattr(head, "bias", None) is not None:
        raise WorkloadError(f"{type(model).__name__}'s lm_head has a bias; e @ cᵀ cannot hold it")
    if input_ids.dim() != 2:
        raise WorkloadError(f"input_ids must be (batch, seq), got {tuple(input_ids.shape)}")
    if input_ids.shape[1] < 2:
        raise WorkloadError("each sequence needs at least 2 tokens (one to predict the next)")
    caught: list[torch.Tensor] = []

    def hook(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        caught.append(args[0].detach())

    handle = head.register_forward_pre_hook(hook)
    try:
        with torch.no_grad():
            model(input_ids=input_ids, attention_mask=attention_mask)
    finally:
        handle.remove()
    if len(caught) != 1:
        raise WorkloadError(f"the lm_head ran {len(caught)} times in one forward, expected once")
    hidden = caught[0]
    if hidden.shape[:2] != input_ids.shape:
        raise WorkloadError(
            f"lm_head's input is {tuple(hidden.shape)}, expected {tuple(input_ids.shape)} x D "
            "(a model that keeps only some positions' logits?)"
        )
    softcap = getattr(model.config, "final_logit_softcapping", None)
    return hidden, head.weight.detach(), None if softcap is None else float(softcap)


def next_token_targets(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """(B, T-1) next-token ids of positions 0..T-2; ``-100`` where the next one is padding."""
    targets = input_ids[:, 1:].clone().long()
    if attention_mask is not None:
        targets[attention_mask[:, 1:] == 0] = IGNORE
    return targets


def dump_workload(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    path: str | os.PathLike[str],
    *,
    attention_mask: torch.Tensor | None = None,
    dtype: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the safetensors dump of ``model`` on ``input_ids`` to ``path``; its summary.

    ``dtype`` ("fp32", "bf16", "fp16") converts ``e`` and ``c``; default: the model's.
    ``metadata`` (JSON-able) is stored as the file's ``provenance`` string. Raises
    ``WorkloadError`` (one line) for NaN/inf states, all targets ignored and the like.
    """
    from safetensors.torch import save_file

    if dtype is not None and dtype not in DUMP_DTYPES:
        raise WorkloadError(f"dtype {dtype!r}: use one of {', '.join(DUMP_DTYPES)}")
    hidden, weight, softcap = capture(model, input_ids, attention_mask)
    e = hidden[:, :-1].reshape(-1, hidden.shape[-1])
    targets = next_token_targets(input_ids, attention_mask).reshape(-1)
    if attention_mask is not None:  # rows that are padding themselves predict nothing
        targets[attention_mask[:, :-1].reshape(-1) == 0] = IGNORE
    to = DUMP_DTYPES[dtype] if dtype else weight.dtype
    tensors = {
        "e": e.to(to).contiguous().cpu(),
        "c": weight.to(to).contiguous().cpu(),
        "targets": targets.contiguous().cpu(),
    }
    meta = {} if softcap is None else {"softcap": repr(softcap)}
    if metadata:
        meta["provenance"] = json.dumps(metadata, sort_keys=True)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    save_file(tensors, str(tmp), metadata=meta or None)
    try:
        read_dump(tmp)  # what `run --workload` would refuse is refused here
    except WorkloadError as err:
        tmp.unlink()
        raise WorkloadError(str(err).replace(str(tmp), str(path))) from None
    tmp.replace(path)
    return {
        "path": str(path),
        "tokens": e.shape[0],
        "vocab": weight.shape[0],
        "hidden": weight.shape[1],
        "dtype": str(to).removeprefix("torch."),
        "softcap": softcap,
        "ignored": int((targets == IGNORE).sum()),
        "bytes": path.stat().st_size,
    }


def read_provenance(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``provenance`` metadata a dump was written with, if any."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        text = (f.metadata() or {}).get("provenance")
    return None if text is None else json.loads(text)
