"""torchtune's chunked-output cross-entropy, fed the way torchtune's models feed it.

``TransformerDecoder.chunked_output`` (torchtune 0.6.1) splits the final hidden
state ``[b, s, d]`` into ``num_output_chunks`` pieces along the sequence and
applies the output projection to each, returning a list of ``[b, s/k, V]``
logits in the model's dtype; ``CEWithChunkedOutputLoss`` then upcasts one chunk
at a time to fp32 for ``F.cross_entropy(reduction="sum")`` and divides by the
number of non-ignored labels. Both steps run inside ``loss_fn`` (so the output
projection is timed, as for every other method), with a batch of one:
``e`` becomes ``[1, N, D]`` and the targets ``[1, N]``. The projection is
``F.linear(chunk, c)``, which is what torchtune's bias-free ``nn.Linear`` head
and its ``TiedLinear`` compute. Eager: torchtune's recipes compile the loss's
``compute_cross_entropy`` only with ``compile: True``, which is not the default.

All chunks' logits stay alive for the backward, so the N x V logits are
materialised (in the input dtype); only the fp32 upcast is chunked.

No label smoothing (beta > 0 is unsupported) and no logit softcap: torchtune
0.6.1 has none in its loss path (its Gemma2 ``final_capping_value`` is applied
to the normed hidden state, not to the logits), so softcap is unsupported
rather than bolted on here. In a step it takes the decoder's hidden states alike.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from perfsuite.method import Capabilities, Case, LossFn, SimpleMethod, StepPatch, Unavailable

NUM_OUTPUT_CHUNKS = 8


def _chunked_loss(ignore_index: int):
    try:
        from torchtune.modules.loss import CEWithChunkedOutputLoss
    except ImportError as err:  # installed but broken (e.g. torchao/torch mismatch)
        raise Unavailable(f"torchtune failed to import: {err}") from err
    return CEWithChunkedOutputLoss(num_output_chunks=NUM_OUTPUT_CHUNKS, ignore_index=ignore_index)


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
        caps=Capabilities(label_smoothing=False, softcap=False, logit_copies=(4.0, 4.0)),
        requires=("torchtune", "torchao"),
        distributions=("torchtune", "torchao"),
        step=StepPatch(_patch, holds="chunks"),
    ),
]
