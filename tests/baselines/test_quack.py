"""QuACK's chunked linear cross-entropy: honest statuses everywhere, and on a Hopper or
Blackwell GPU with quack-kernels installed, loss and gradients against the fp32
reference.

quack does not install usefully nor run on CPU, so here only its declarations and its
reasons are tested (a CPU run records it unavailable as any method: tests/run/).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from perfsuite.baselines import quack as adapter
from perfsuite.baselines.quack import CPU_REASON, METHODS, MISSING_REASON
from perfsuite.method import Case, Unavailable
from perfsuite.plan.registry import all_methods

QUACK = METHODS[0]
SHAPE = dict(tokens=64, vocab=512, hidden=64)  # multiples of 8, as quack's TMA needs


def test_declares_what_it_is():
    assert [m.name for m in METHODS] == ["quack"] and "quack" in all_methods()
    caps = QUACK.caps
    assert not caps.label_smoothing and not caps.softcap and caps.grads_in_forward
    assert caps.devices == {"cuda"} and caps.dtypes == {"bf16", "fp16"}
    assert QUACK.requires == ("quack",)
    assert "quack-kernels" in QUACK.distributions  # its version lands in the provenance


def test_cpu_and_a_missing_package_are_unavailable_with_the_reason(monkeypatch):
    if importlib.util.find_spec("quack") is None:
        assert QUACK.availability("cpu") == MISSING_REASON
        assert QUACK.availability("cuda") == MISSING_REASON
    monkeypatch.setattr("perfsuite.method.missing_packages", lambda *names: [])
    assert QUACK.availability("cpu") == CPU_REASON


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        (Case(**SHAPE, beta=0.1), "no label smoothing"),
        (Case(**SHAPE, softcap=30.0), "no softcap"),
        (Case(**SHAPE, dtype="fp32"), "no fp32 support"),
        (Case(tokens=60, vocab=500, hidden=64), "multiples of 8 (N=60, V=500)"),
    ],
)
def test_unsupported_cases_say_why(case, reason):
    assert reason in QUACK.unsupported_reason(case)
    assert QUACK.unsupported_reason(Case(**SHAPE)) is None


def test_older_gpus_are_unavailable(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(Unavailable, match="Hopper and Blackwell .* this GPU is sm_80"):
        adapter._check_device(torch.device("cuda"))
    with pytest.raises(Unavailable, match="needs CUDA"):
        adapter._check_device(torch.device("cpu"))


def _quack_runs_here() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA device"
    if importlib.util.find_spec("quack") is None:
        return "quack-kernels not installed"
    if torch.cuda.get_device_capability() < adapter.MIN_CAPABILITY:
        return "quack needs a Hopper or Blackwell GPU"
    return None


@pytest.mark.cuda
@pytest.mark.skipif(_quack_runs_here() is not None, reason=str(_quack_runs_here()))
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_matches_the_fp32_reference_on_cuda(check, dtype):
    check(QUACK, Case(**SHAPE, dtype=dtype, device="cuda"))
