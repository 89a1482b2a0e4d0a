"""A trained-activation workload made here: train a converge preset on text, dump a batch.

We cannot download a trained model, but ``perfsuite converge`` trains a real
``transformers`` Llama on the help pages bundled with Python. ``train_and_dump``
runs converge's own training loop (``converge.train.train_run``, eager loss, fp32,
the preset's batches in the preset's order) on its ``text`` data with a cross-word
BPE (the word-split one stops at ~9.2k ids there), loads the final weights into a
fresh model and dumps hidden states of the first training sequences: the text
the model was tuned on, which is where a training step's gradient is taken.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from perfsuite.activations.dump import dump_workload
from perfsuite.plan.workloads import WorkloadError

DEFAULT_PRESET = "cpu-filtering"


def train_model(
    preset_name: str,
    *,
    steps: int | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    device: str = "cpu",
) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """``(model, dataset, record)``: the preset trained by converge's loop (fp32)."""
    from torch.nn.utils import vector_to_parameters

    from perfsuite.converge.model import build_model, set_deterministic
    from perfsuite.converge.presets import PRESETS
    from perfsuite.converge.text import make_text_dataset
    from perfsuite.converge.train import train_run
    from perfsuite.plan.registry import get_method

    if preset_name not in PRESETS:
        raise WorkloadError(f"--preset {preset_name!r}: one of {', '.join(PRESETS)}")
    preset = PRESETS[preset_name].with_steps(steps)
    set_deterministic(preset.seed)
    p = preset
    data = make_text_dataset(
        p.vocab, p.steps, p.batch, p.seq, p.eval_batches, p.seed, p.train_batches, split_words=False
    )
    start = time.perf_counter()
    result = train_run(get_method("eager"), preset, data, 0.0, "fp32", device, on_step=on_step)
    wall = time.perf_counter() - start
    if result.status != "ok" or result.params is None:
        raise WorkloadError(f"training {preset_name} failed: {result.status}: {result.reason}")
    model = build_model(preset, torch.float32, device)
    vector_to_parameters(result.params.to(device), model.parameters())
    losses = result.losses
    record = {
        "preset": preset.to_dict(),
        "data": data.describe(),
        "train_wall_s": round(wall, 1),
        "device": device,
        "train_loss_first": losses[0],
        "train_loss_last_10_mean": sum(losses[-10:]) / len(losses[-10:]),
        "heldout": {k: v for k, v in (result.heldout or {}).items() if isinstance(v, float)},
    }
    return model.eval(), data, record


def train_and_dump(
    out: str | Path,
    *,
    preset_name: str = DEFAULT_PRESET,
    tokens: int = 2048,
    steps: int | None = None,
    command: str | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Train, then dump ``tokens`` rows (whole training sequences) to ``out``; the record."""
    model, data, record = train_model(preset_name, steps=steps, on_step=on_step, device=device)
    seq = data.train.shape[-1] - 1
    sequences = data.train.reshape(-1, seq + 1)
    wanted = math.ceil(tokens / seq)
    if wanted > sequences.shape[0]:
        raise WorkloadError(
            f"--tokens {tokens}: the preset's training batches hold {sequences.shape[0] * seq}"
        )
    record["dumped"] = f"the first {wanted} training sequences of {seq + 1} tokens"
    record["command"] = command
    ids = sequences[:wanted].to(next(model.parameters()).device)
    info = dump_workload(model, ids, out, metadata=record)
    return {**record, **info}
