"""The cuBLAS route (engine="cublas"): exact against the fp32 reference, bit-identical run
to run; and the route rule. Its agreement with the Triton route: test_slices.py; no host
sync: test_no_host_sync.py."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
import torch
from helpers import DTYPES, bits, check, grads, make_inputs

from perfsuite.kernels import api, cublas_route, routes, slices

ROOT = Path(__file__).resolve().parents[2]
# The committed results files a measured route entry names as its provenance.
RESULTS_FILE = re.compile(r"reports/\S+?\.jsonl")
# Several row blocks, and two column tiles inside each slice, on tiny problems.
SMALL_BLOCKS = (16, 32)


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch, device):
    """Small epilogue blocks (a GPU uses the module's own tiles)."""
    if device == "cpu":
        monkeypatch.setattr(cublas_route, "INTERPRETER_BLOCK", SMALL_BLOCKS)


def _budget(n: int, d: int, dtype: torch.dtype, device: str) -> int:
    """One 128-column grain (four epilogue tiles) per slice: V = 200 takes slices of 128, 72."""
    per = slices.bytes_per_column(n, d, dtype, torch.device(device), "cublas", False)
    assert slices.slice_width(200, per, slices.WIDTH_GRAIN * per) == 128
    return slices.WIDTH_GRAIN * per


# dtype × β × softcap in full; class weights with z-loss, and impl="fused", each on half,
# so that every pair of values of any two axes appears.
CASES = [
    (dtype, beta, cap, (i + j + k) % 2 == 1, ("split", "fused")[(i + j) % 2])
    for (i, dtype), (j, beta), (k, cap) in itertools.product(
        enumerate(DTYPES), enumerate([0.0, 0.1]), enumerate([None, 20.0])
    )
]


@pytest.mark.parametrize(("dtype", "beta", "softcap", "terms", "impl"), CASES)
def test_matches_reference(device, monkeypatch, dtype, beta, softcap, terms, impl):
    """engine="cublas" reaches the route's forward and backward, through the custom op
    (split) and through the autograd Function (fused), and matches the reference."""
    from perfsuite.kernels import function

    calls = []

    def spy(name, fn):
        return lambda *a, **kw: calls.append(name) or fn(*a, **kw)

    monkeypatch.setattr(function, "cublas_forward", spy("fwd", cublas_route.cublas_forward))
    monkeypatch.setattr(cublas_route, "grad_slice", spy("bwd", cublas_route.grad_slice))
    e, c, t = make_inputs(20, 200, 20, DTYPES[dtype], device)
    weight = torch.rand(200, device=device) + 0.5 if terms else None
    check(
        e, c, t, beta=beta, softcap=softcap, weight=weight, z_loss=1e-3 if terms else 0.0,
        engine="cublas", memory_budget=_budget(20, 20, e.dtype, device), impl=impl,
    )  # fmt: skip
    assert calls == ["fwd", "bwd", "bwd"]  # a gradient slice of 128 columns, then one of 72


def test_forward_state_equals_torch_engine(device):
    """The LSE epilogue's merge is native.torch_forward's, to fp32 reassociation."""
    from perfsuite.kernels.native import torch_forward

    e, c, t = make_inputs(37, 200, 45, torch.float32, device)
    weight = torch.rand(200, device=device) + 0.5
    budget = _budget(37, 45, e.dtype, device)
    for softcap, w in ((None, None), (20.0, weight)):
        options = dict(smoothing=True, softcap=softcap, budget=budget, weight=w)
        ours = cublas_route.cublas_forward(e, c, t, **options)
        ref = torch_forward(e, c, t, **options)
        for name in ("row_max", "log_sum", "target_logit", "rel_sum"):
            torch.testing.assert_close(
                getattr(ours, name), getattr(ref, name), rtol=1e-5, atol=1e-5, msg=name
            )


def test_bit_identical_run_to_run(device):
    e, c, t = make_inputs(20, 200, 20, torch.bfloat16, device)
    budget = _budget(20, 20, e.dtype, device)
    options = dict(label_smoothing=0.1, softcap=30.0, engine="cublas", memory_budget=budget)
    first = grads(e, c, t, **options)
    second = grads(e, c, t, **options)
    for name, a, b in zip(("loss", "dE", "dC"), first, second, strict=True):
        assert torch.equal(bits(a), bits(b)), name


def test_rule_has_a_route_and_a_provenance_for_every_arch_and_dtype():
    for arch, dtype in itertools.product(routes.ARCHS, routes.DTYPES):
        entry = routes.TABLE[arch, dtype]
        assert routes.route_for(arch, dtype) == entry.route
        assert entry.route in routes.ROUTES and entry.provenance
    assert routes.other_route("triton") == "cublas"
    assert routes.other_route("cublas") == "triton"
    with pytest.raises(ValueError, match="sm_70"):
        routes.route_for("sm_70", "bf16")
    with pytest.raises(ValueError, match="unknown route"):
        routes.other_route("torch")


def test_unmeasured_entries_keep_the_triton_route():
    """Only a GPU that timed both routes changes an entry; each (arch, dtype) on its own:
    the H200 measured sm_90 bf16, not fp16 or fp32."""
    unmeasured = {key for key, e in routes.TABLE.items() if e.provenance == routes.UNMEASURED}
    assert all(routes.TABLE[key].route == "triton" for key in unmeasured)
    assert ("sm_90", "bf16") not in unmeasured
    assert {("sm_90", "fp16"), ("sm_90", "fp32"), ("sm_100", "bf16")} <= unmeasured


def test_a_measured_entry_is_the_faster_route_in_the_file_it_names():
    """A measured entry's provenance names the committed ``kernel_checks.py tma`` output
    that timed both routes in one process: there its route was the faster at fwd+bwd,
    bit-identical over two calls, with the TMA configs pinned for that arch today."""
    from perfsuite.kernels.configs import tma_config

    measured = {key: e for key, e in routes.TABLE.items() if e.provenance != routes.UNMEASURED}
    assert measured
    for (arch, _dtype), entry in measured.items():
        (name,) = RESULTS_FILE.findall(entry.provenance)
        rows = {}
        for line in (ROOT / name).read_text().splitlines():
            row = json.loads(line)
            rows[row["tma"]] = row
        triton, cublas = rows["best pair"], rows["cublas route"]
        assert triton["deterministic"] and "error" not in triton
        faster = "triton" if triton["fwdbwd_ms"] < cublas["fwdbwd_ms"] else "cublas"
        assert entry.route == faster, (arch, triton["fwdbwd_ms"], cublas["fwdbwd_ms"])
        assert triton["forward"] == tma_config("forward", arch).describe()
        assert triton["slices"] == tma_config("slices", arch).describe()


def test_auto_engine_follows_the_rule_on_cuda(monkeypatch):
    """engine="auto" on CUDA is the table's route for the arch and dtype, and one changed
    entry changes it; the tile backward stays Triton."""
    cuda = torch.device("cuda")
    monkeypatch.setattr(api, "arch_of", lambda device: "sm_90")
    assert api._resolve(cuda, "auto", "auto", None, None, torch.bfloat16)[1] == (
        routes.route_for("sm_90", "bf16")
    )
    for route in routes.ROUTES:
        monkeypatch.setitem(routes.TABLE, ("sm_90", "bf16"), routes.Route(route, "a test"))
        assert api._resolve(cuda, "auto", "auto", None, None, torch.bfloat16)[1] == route
        assert api._resolve(cuda, "tiles", "auto", None, None, torch.bfloat16)[1] == "triton"
    assert api._resolve(cuda, "auto", "auto", None, None, torch.float16)[1] == "triton"
    assert api._resolve(cuda, "auto", "triton", None, None, torch.bfloat16)[1] == "triton"
    assert api._resolve(cuda, "auto", "cublas", None, None, torch.float16)[1] == "cublas"
    with pytest.raises(ValueError, match="tiles"):
        api._resolve(cuda, "tiles", "cublas", None, None, torch.bfloat16)
