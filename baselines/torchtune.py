"""torchtune's chunked-output cross-entropy, fed as ``TransformerDecoder.chunked_output``
(torchtune 0.6.1) feeds it, a batch of one, eager. No logit softcap: Gemma2's
``final_capping_value`` caps the hidden state, not the logits."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from perfsuite.method import Capabilities, Case, Holds, LossFn, SimpleMethod, StepPatch, imported

NUM_OUTPUT_CHUNKS = 8


def _chunked_loss(ignore_index: int):
    loss = imported("torchtune.modules.loss", "CEWithChunkedOutputLoss")
    return loss(num_output_chunks=NUM_OUTPUT_CHUNKS, ignore_index=ignore_index)


def _build_chunked(case: Case, c: torch.Tensor) -> LossFn:
    loss = _chunked_loss(case.ignore_index)

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        h = e.unsqueeze(0)  # [1, N, D]: batch of one
        # TransformerDecoder.chunked_output: self.output(chunk) per sequence chunk.
        logits = [F.linear(chunk, c) for chunk in h.chunk(loss.num_output_chunks, dim=1)]
        return loss(logits, targets.unsqueeze(0))

    return loss_fn


def _patch(model: torch.nn.Module, preset: object, beta: float):
    from perfsuite.step.model import IGNORE_INDEX

    loss = _chunked_loss(IGNORE_INDEX)

    def loss_fn(ids: torch.Tensor) -> torch.Tensor:
        hidden = model.model(input_ids=ids).last_hidden_state
        logits = [F.linear(h, model.lm_head.weight) for h in hidden.chunk(NUM_OUTPUT_CHUNKS, 1)]
        return loss(logits, F.pad(ids, (0, 1), value=IGNORE_INDEX)[..., 1:])

    return loss_fn


METHODS = [
    SimpleMethod(
        name="torchtune-chunked",
        description=f"torchtune CEWithChunkedOutputLoss({NUM_OUTPUT_CHUNKS} chunks): per-chunk "
        "output projection (as TransformerDecoder.chunked_output) + per-chunk fp32 CE, eager",
        build=_build_chunked,
        # Every chunk's logits stay alive: about eager's copies, softcap or not.
        caps=Capabilities(label_smoothing=False, softcap=False, holds=Holds("chunks", (4.0, 4.0))),
        requires=("torchtune", "torchao"),
        distributions=("torchtune", "torchao"),
        # torchtune's import pulls in datasets and what follows it.
        pip=(
            "torchtune==0.6.1",
            "torchao==0.17.0",
            "torchdata==0.11.0",
            "datasets",
            "kagglehub",
            "kagglesdk",
            "omegaconf",
            "blobfile",
            "pycryptodomex",
            "dill==0.4.1",
            "multiprocess",
        ),  # fmt: skip
        paper="torchtune_chunked_8",
        step=StepPatch(_patch),
    ),
]
