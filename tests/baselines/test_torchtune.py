"""torchtune's CEWithChunkedOutputLoss adapter against the fp32 reference."""

from __future__ import annotations

import pytest
import torch

from perfsuite.baselines.torchtune import METHODS, NUM_OUTPUT_CHUNKS
from perfsuite.method import Case, Unsupported

METHOD = METHODS[0]
SMALL = dict(tokens=64, vocab=500, hidden=64)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_declares_what_it_is():
    assert METHOD.name == "torchtune-chunked"
    assert NUM_OUTPUT_CHUNKS == 8
    assert METHOD.requires == tuple(METHOD.distributions) == ("torchtune", "torchao")
    caps = METHOD.caps
    assert not caps.label_smoothing and not caps.softcap and not caps.grads_in_forward
    assert not caps.triton and caps.holds.whole_logits


def test_smoothing_and_softcap_are_unsupported_not_a_plain_number():
    case = Case(**SMALL, dtype="fp32", beta=0.1)
    assert METHOD.unsupported_reason(case) == "no label smoothing (asked beta=0.1)"
    c = torch.zeros(SMALL["vocab"], SMALL["hidden"])
    with pytest.raises(Unsupported, match="no label smoothing"):
        METHOD.prepare(case, c)
    with pytest.raises(Unsupported, match="no softcap"):
        METHOD.prepare(Case(**SMALL, dtype="fp32", softcap=30.0), c)


def test_projection_is_inside_the_loss():
    """The output projection runs in loss_fn, in chunks (so it is timed), and
    the loss sees 8 chunks of logits in the input dtype."""
    from torchtune.modules.loss import CEWithChunkedOutputLoss

    seen = []
    real = CEWithChunkedOutputLoss.forward

    def spy(self, logits, labels):
        seen.append([(tuple(x.shape), x.dtype) for x in logits])
        return real(self, logits, labels)

    case = Case(**SMALL, dtype="bf16")
    e = torch.randn(64, 64, dtype=torch.bfloat16)
    c = torch.randn(500, 64, dtype=torch.bfloat16)
    t = torch.randint(0, 500, (64,))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CEWithChunkedOutputLoss, "forward", spy)
        METHOD.prepare(case, c)(e, c, t)
    assert seen == [[((1, 8, 500), torch.bfloat16)] * 8]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("tokens", [64, 61])  # 61: uneven chunks
def test_matches_reference_cpu(check, dtype, tokens):
    case = Case(tokens=tokens, vocab=500, hidden=64, dtype=dtype, device="cpu")
    assert METHOD.availability("cpu") is None
    check(METHOD, case)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_matches_reference_cuda(check, dtype):
    case = Case(tokens=256, vocab=2048, hidden=256, dtype=dtype, device="cuda")
    assert METHOD.availability("cuda") is None
    check(METHOD, case)
