"""Ours' route methods: each forces one route of the slice algorithm, both pass the suite's
gate, and plain ``ours`` leaves the choice to the rule."""

from __future__ import annotations

import pytest
import torch

from perfsuite.baselines.ours import METHODS
from perfsuite.kernels import routes
from perfsuite.method import Case

BY_NAME = {m.name: m for m in METHODS}
ROUTE_METHODS = [routes.method_for(r) for r in routes.ROUTES]
TINY = dict(tokens=24, vocab=80, hidden=32)


def test_each_route_has_its_ablation_method():
    for name in ROUTE_METHODS:
        method = BY_NAME[name]
        caps = method.caps
        # The slice backward's terms, on either device (Triton on a CPU: interpreted).
        assert caps.z_loss and caps.class_weights and caps.triton
        assert caps.devices == frozenset({"cpu", "cuda"})
        assert not method.timed_by_default  # an ablation: asked for by name
    # The torch-ops probe stays what it was: CUDA only, engine="torch".
    assert BY_NAME["ours-cublas"].caps.devices == frozenset({"cuda"})


def _engine(monkeypatch, name: str, device: str) -> str:
    """The engine the method's loss passes to the kernel on ``device``."""
    import perfsuite.kernels as kernels

    seen = {}
    monkeypatch.setattr(kernels, "linear_cross_entropy", lambda *a, **kw: seen.update(kw))
    case = Case(**TINY, device=device)
    BY_NAME[name].build(case, torch.zeros(TINY["vocab"], TINY["hidden"]))(None, None, None)
    return seen["engine"]


def test_engines(monkeypatch):
    assert _engine(monkeypatch, "ours-route-triton", "cuda") == "triton"
    assert _engine(monkeypatch, "ours-route-cublas", "cuda") == "cublas"
    assert _engine(monkeypatch, "ours-route-cublas", "cpu") == "cublas"
    # ours: the rule on a GPU, the native engine on a CPU.
    assert _engine(monkeypatch, "ours", "cuda") == "auto"
    assert _engine(monkeypatch, "ours", "cpu") == "torch"
    assert _engine(monkeypatch, "ours-cublas", "cuda") == "torch"


@pytest.mark.parametrize("name", ROUTE_METHODS)
def test_route_methods_pass_the_gate(check, name):
    """The suite's gate (its reference has no training terms: tests/kernels holds those)."""
    check(BY_NAME[name], Case(**TINY, dtype="bf16", beta=0.1, softcap=20.0))
