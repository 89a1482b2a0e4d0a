"""Cut Cross-Entropy adapters: CPU honesty (unavailable, unsupported) and, on
CUDA, loss and gradients against the fp32 reference.

CCE's kernels do not run under the Triton interpreter, so on CPU only the
declarations are tested, plus the wiring of ``cce-no-sort`` (assembled here
from CCE's kernels) with those kernels replaced by torch equivalents.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

from perfsuite.baselines import cce as cce_adapter
from perfsuite.baselines.cce import CPU_REASON, METHODS
from perfsuite.method import Case, Unsupported

BY_NAME = {m.name: m for m in METHODS}
SMALL = dict(tokens=64, vocab=500, hidden=64)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_declares_what_it_is():
    assert sorted(BY_NAME) == ["cce", "cce-no-filter", "cce-no-sort"]
    for method in METHODS:
        assert method.requires == ("cut_cross_entropy",)
        assert "cut-cross-entropy" in method.distributions
        caps = method.caps
        assert not caps.label_smoothing and caps.softcap and caps.triton
        assert caps.devices == {"cuda"} and not caps.holds.whole_logits
        assert method.availability("cpu") == CPU_REASON


def test_missing_package_is_unavailable_on_either_device(monkeypatch):
    """Said before the CPU reason (the three share the one package)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda mod, *a: None if mod == "cut_cross_entropy" else real(mod, *a),
    )
    for device in ("cpu", "cuda"):
        assert BY_NAME["cce"].availability(device) == "cut_cross_entropy not installed"


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_smoothing_and_fp32_are_unsupported_not_another_number(name):
    method = BY_NAME[name]
    case = Case(**SMALL, dtype="bf16", beta=0.1, device="cuda")
    reason = method.unsupported_reason(case)
    assert reason is not None and reason.startswith("no label smoothing")
    with pytest.raises(Unsupported, match="no label smoothing"):
        method.prepare(case, torch.zeros(SMALL["vocab"], SMALL["hidden"], dtype=torch.bfloat16))
    assert method.unsupported_reason(Case(**SMALL, dtype="bf16", beta=0.0)) is None
    # cce_backward_kernel asserts bf16/fp16 embeddings.
    assert method.unsupported_reason(Case(**SMALL, dtype="fp32")) == "no fp32 support"


def test_no_sort_wiring_with_torch_kernels(monkeypatch):
    """cce-no-sort with CCE's three kernels swapped for torch versions of their
    contracts: the loss and gradients must be the reference's, the forward must
    not ask for logit averages and the backward must filter without ordering."""
    pytest.importorskip("cut_cross_entropy")
    import cut_cross_entropy.cce_backward as bwd_mod
    import cut_cross_entropy.cce_lse_forward as lse_mod
    import cut_cross_entropy.indexed_dot as dot_mod

    seen = {}

    def rows(e, valids):
        return e if valids is None else e[valids]

    def lse_kernel(e, c, valids=None, softcap=None, return_logit_avg=False):
        seen["return_logit_avg"] = return_logit_avg
        return torch.logsumexp(rows(e, valids).float() @ c.float().T, dim=-1)

    def dot_kernel(e, c, inds, shift=False, valids=None, softcap=None, out_dtype=None):
        e, inds = rows(e, valids), (inds if valids is None else inds[valids])
        return -(e.float() * c.float()[inds]).sum(-1)

    def bwd_kernel(do, e, c, lse, valids, softcap, filter_eps, targets=None, shift=False,
                   vocab_ordering=None, grad_scale=1.0):  # fmt: skip
        seen["filter_eps"], seen["vocab_ordering"] = filter_eps, vocab_ordering
        idx = torch.arange(e.size(0)) if valids is None else valids
        er = e[idx].float()
        d = torch.exp(er @ c.float().T - lse[:, None])
        d[torch.arange(len(idx)), targets[idx]] -= 1.0
        d *= grad_scale * do
        de = torch.zeros_like(e, dtype=torch.float32)
        de[idx] = d @ c.float()
        return de.to(e.dtype), (d.T @ er).to(c.dtype)

    cce_adapter._no_sort_function.cache_clear()
    monkeypatch.setattr(lse_mod, "cce_lse_forward_kernel", lse_kernel)
    monkeypatch.setattr(dot_mod, "indexed_neg_dot_forward_kernel", dot_kernel)
    monkeypatch.setattr(bwd_mod, "cce_backward_kernel", bwd_kernel)
    try:
        case = Case(**SMALL, dtype="bf16")
        fn = cce_adapter._build_no_sort(case, torch.empty(0))
        torch.manual_seed(0)
        e = torch.randn(64, 64, dtype=torch.bfloat16, requires_grad=True)
        c = (torch.randn(500, 64) / 8).to(torch.bfloat16).requires_grad_(True)
        t = torch.randint(0, 500, (64,))
        t[::7] = -100
        loss = fn(e, c, t)
        loss.backward()
        ge, gc = e.grad.float(), c.grad.float()
        e.grad = c.grad = None
        ref = F.cross_entropy(e.float() @ c.float().T, t)
        ref.backward()
    finally:
        cce_adapter._no_sort_function.cache_clear()
    assert seen == {
        "return_logit_avg": False,
        "filter_eps": torch.finfo(torch.bfloat16).eps / 32,
        "vocab_ordering": None,
    }
    torch.testing.assert_close(loss.float(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ge, e.grad.float(), rtol=1e-2, atol=1e-4)
    torch.testing.assert_close(gc, c.grad.float(), rtol=1e-2, atol=1e-4)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("name", sorted(BY_NAME))
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("softcap", [None, 30.0])
def test_matches_reference_cuda(check, name, dtype, softcap, request):
    case = Case(tokens=256, vocab=2048, hidden=256, dtype=dtype, softcap=softcap, device="cuda")
    assert BY_NAME[name].availability("cuda") is None
    if dtype == "bf16":
        # CCE 25.1.1 accumulates dE in bf16 (a lock-add per vocab block): on an H100
        # (2026-11-22) two of these cases' grad_e errors were 2.29e-5 against a gate
        # bound of 2.01e-5. That is CCE's precision, not the adapter's; the suite's
        # gate reports it as `wrong` (and still times it).
        request.applymarker(pytest.mark.xfail(strict=False, reason="CCE's bf16 dE accumulation"))
    check(BY_NAME[name], case)
