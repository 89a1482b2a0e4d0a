"""torch.compile: the default path is one custom op each way, with fakes; no graph break
(a tiny model under ``fullgraph=True``, its graphs counted on the compile by dynamo's
``ExplainWithBackend``; a negative control adds a host sync)."""

from __future__ import annotations

import pytest
import torch

from perfsuite.kernels import linear_cross_entropy

torch_dynamo = pytest.importorskip("torch._dynamo")
from torch._dynamo.backends.debugging import ExplainWithBackend  # noqa: E402

OPTIONS = dict(label_smoothing=0.1, softcap=20.0, z_loss=1e-3, engine="torch")


class Tiny(torch.nn.Module):
    def __init__(self, d_in: int = 16, d: int = 24, vocab: int = 96) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(d_in, d)
        self.classifier = torch.nn.Linear(d, vocab, bias=False)
        self.register_buffer("weight", torch.rand(vocab) + 0.5)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.hidden(x))
        return linear_cross_entropy(
            h, self.classifier.weight, targets, weight=self.weight, **OPTIONS
        )


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(4, 8, 16)
    targets = torch.randint(0, 96, (4, 8))
    targets[0, :3] = -100
    return x, targets


def _grads(model: Tiny, step, x, targets) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    loss = step(x, targets)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_ops_are_registered_with_fakes() -> None:
    """opcheck: schema, fake tensors, autograd registration (fast subset)."""
    e, c = torch.randn(12, 8, requires_grad=True), torch.randn(40, 8, requires_grad=True)
    t = torch.randint(0, 40, (12,))
    args = (e, c, t, torch.rand(40), 0.1, 20.0, -100, "mean", 1e-3, "torch", None)
    torch.library.opcheck(
        torch.ops.perfsuite.linear_cross_entropy.default, args,
        test_utils=("test_schema", "test_faketensor", "test_autograd_registration"),
    )  # fmt: skip


def test_compiled_step_has_no_graph_break_and_matches_eager() -> None:
    torch.manual_seed(0)
    model = Tiny()
    x, targets = _batch()
    explained = ExplainWithBackend("aot_eager")  # its graphs counted as dynamo.explain does
    compiled = torch.compile(model, backend=explained, fullgraph=True)
    eager_loss, eager_grads = _grads(model, model, x, targets)
    loss, grads = _grads(model, compiled, x, targets)
    assert explained.output().graph_count == 1, explained.break_reasons
    torch.testing.assert_close(loss, eager_loss, rtol=1e-6, atol=0)
    for a, b in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    # The backward really went through our op in the compiled graph, not a decomposition.
    assert loss.item() > 0 and all(g.abs().sum() > 0 for g in grads)


def test_a_host_sync_would_be_caught() -> None:
    """Negative control: the same check fails once the step syncs on a value."""

    def step(x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = Tiny()(x, targets)
        return loss * float(loss.item())

    explained = torch._dynamo.explain(step)(*_batch())
    assert explained.graph_break_count >= 1
    torch._dynamo.reset()
    with pytest.raises(Exception, match="(?i)graph break|item|unsupported"):
        torch.compile(step, backend="eager", fullgraph=True)(*_batch())


def test_the_fused_ablation_compiles_with_one_break_at_its_target_check() -> None:
    """impl="fused" is an autograd.Function, not an op: compiled it equals eager, breaking
    only where it reads the targets on the host, which keeps a bad target an error. The
    torch engine: dynamo cannot trace the Triton interpreter's Python."""
    torch.manual_seed(0)
    e, c = torch.randn(32, 16), torch.randn(64, 16) / 4
    t = torch.randint(0, 64, (32,))

    def step(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(
            e, c, t, label_smoothing=0.1, softcap=20.0, impl="fused", engine="torch"
        )

    explained = ExplainWithBackend("aot_eager")  # its graphs counted as dynamo.explain does
    compiled, results = torch.compile(step, backend=explained), []
    for fn in (step, compiled):
        ee, cc = e.clone().requires_grad_(), c.clone().requires_grad_()
        loss = fn(ee, cc, t)
        loss.backward()
        results.append((loss.detach(), ee.grad, cc.grad))
    for got, want in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    assert explained.output().graph_break_count == 1, explained.break_reasons
    bad = t.clone()
    bad[5] = 64
    with pytest.raises(ValueError, match="targets out of range: 64"):
        compiled(e, c, bad)
