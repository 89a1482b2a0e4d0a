"""A ``--workload FILE`` dump from a causal LM (``transformers``', or one ``workload train``
trained) on a batch of text: what its head sees, its weight, the next tokens, a final softcap."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from perfsuite.method import DTYPES
from perfsuite.plan.workloads import WorkloadError, read_dump

IGNORE = -100


def dump_workload(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    path: str | os.PathLike[str],
    *,
    attention_mask: torch.Tensor | None = None,
    dtype: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the safetensors dump of ``model`` on ``input_ids`` (B, T) to ``path``: what its
    head is fed, caught by a hook (a head with a bias is refused: the loss we benchmark has
    none), read back by ``read_dump`` first (what ``run --workload`` refuses is refused here);
    its summary. ``dtype``: ``e`` and ``c``'s (default: the model's); ``metadata``: provenance."""
    from safetensors.torch import save_file

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
    handle = head.register_forward_pre_hook(lambda _, args: caught.append(args[0].detach()))
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
    weight = head.weight.detach()
    softcap = getattr(model.config, "final_logit_softcapping", None)
    softcap = None if softcap is None else float(softcap)
    e = hidden[:, :-1].reshape(-1, hidden.shape[-1])
    targets = input_ids[:, 1:].clone().long()  # the next token; the last position has none
    if attention_mask is not None:  # padding predicts nothing, and is nothing to predict
        targets[(attention_mask[:, 1:] == 0) | (attention_mask[:, :-1] == 0)] = IGNORE
    targets = targets.reshape(-1)
    to = DTYPES[dtype] if dtype else weight.dtype
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
        read_dump(tmp)
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
