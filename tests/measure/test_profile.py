"""The profiled call: its trace opens, its breakdown adds up and names the GEMMs."""

from __future__ import annotations

import dataclasses
import gzip
import importlib
import json
import pkgutil
import time

import pytest
import torch
import torch.nn.functional as F

from perfsuite.measure.kernel_classes import (
    CLASSES,
    classify,
    jit_names,
    kernel_name,
    ours_names,
    peer_names,
)
from perfsuite.measure.profile import Breakdown, profile_call, trace_name

CPU = torch.device("cpu")
# GEMM-bound on a CPU: 3 GEMMs of 2*N*V*D = 0.5 GFLOP against O(N*V) of the rest (16
# times the size, as it was, only cost more CPU time: the share is the same).
N, V, D = 256, 4096, 256


def linear_ce(n: int, v: int, d: int, device: str = "cpu", dtype=torch.float32):
    """Eager linear cross-entropy, forward and backward: (fn, setup)."""
    gen = torch.Generator(device=device).manual_seed(0)
    e = torch.randn(n, d, device=device, generator=gen).to(dtype).requires_grad_()
    c = torch.randn(v, d, device=device, generator=gen).to(dtype).requires_grad_()
    t = torch.randint(0, v, (n,), device=device, generator=gen)

    def setup() -> None:
        e.grad = c.grad = None

    def fn() -> None:
        F.cross_entropy(F.linear(e, c).float(), t).backward()

    return fn, setup


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    fn, setup = linear_ce(N, V, D)
    setup()
    fn()  # warm, as after the timed samples
    trace = tmp_path_factory.mktemp("traces") / trace_name("eager", "gemm", "fp32", 0.1, "fwd+bwd")
    return profile_call(fn, CPU, setup=setup, trace=trace), trace


def test_trace_opens_as_gzip_json_with_the_calls_events(eager):
    _, trace = eager
    assert trace.name == "eager__gemm__fp32__b0.1__fwd-bwd.json.gz"
    with gzip.open(trace, "rt") as src:
        events = json.load(src)["traceEvents"]
    names = [ev.get("name") for ev in events]
    assert names.count("aten::mm") == 3  # the forward's GEMM and the backward's two


def test_classes_sum_to_the_measured_total_and_it_reads_back_from_json(eager):
    breakdown, _ = eager
    assert set(breakdown.classes) == set(CLASSES)
    assert sum(breakdown.classes.values()) == pytest.approx(breakdown.device_ms)
    # The ops' time against the wall clock of the same call: Python's share is small here.
    assert abs(breakdown.device_ms - breakdown.wall_ms) <= 0.1 * breakdown.wall_ms
    assert breakdown.host_ms == pytest.approx(breakdown.wall_ms - breakdown.device_ms)
    assert breakdown.source == "cpu-ops" and "CPU op self time" in breakdown.note
    data = json.loads(json.dumps(dataclasses.asdict(breakdown), allow_nan=False))
    assert Breakdown(**data) == breakdown  # it round-trips through JSON


def test_gemm_share_of_eager_at_a_gemm_bound_shape_is_above_half(eager):
    breakdown, _ = eager
    assert breakdown.classes["gemm"] > 0.5 * breakdown.device_ms, breakdown.classes
    first = breakdown.top[0]
    assert (first["name"], first["class"], first["calls"]) == ("aten::mm", "gemm", 3)
    ms = [t["ms"] for t in breakdown.top]
    assert len(ms) == 5 and ms == sorted(ms, reverse=True)
    # mm x3, log_softmax and its backward, nll_loss and its backward, fills, grad adds...
    assert 3 < breakdown.launches < 40


def test_host_time_is_what_no_op_accounts_for():
    def fn() -> None:
        torch.ones(64, 64).sum()
        time.sleep(0.02)  # Python, in no op: the host's

    breakdown = profile_call(fn, CPU)
    assert breakdown.host_ms >= 19.5, breakdown
    assert breakdown.device_ms < breakdown.wall_ms - 19.5


def test_setup_and_flush_stay_outside_the_profiled_call():
    calls = []

    def setup() -> None:
        calls.append("setup")
        time.sleep(0.05)

    breakdown = profile_call(
        lambda: calls.append("fn"), CPU, setup=setup, flush=lambda: calls.append("flush")
    )
    assert calls == ["setup", "flush", "fn"]
    assert breakdown.wall_ms < 25, breakdown


def test_a_trace_is_named_in_safe_characters():
    name = trace_name("F.linear_cross_entropy", "gemma2 2b", "bf16", 0.0, "fwd+bwd")
    assert name == "F.linear_cross_entropy__gemma2-2b__bf16__b0__fwd-bwd.json.gz"


def test_ours_are_the_jit_functions_of_the_kernels_package_and_no_peers(monkeypatch):
    """The names read from the source are the kernels the imported package defines."""
    if not torch.cuda.is_available():  # as tests/kernels/conftest.py: triton has no CPU driver
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    from triton.runtime.jit import KernelInterface

    import perfsuite.kernels as package

    defined = set()
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, KernelInterface):
                while hasattr(value, "fn"):  # heuristics and autotuners wrap the function
                    value = value.fn
                defined.add(value.__name__)
    assert defined and ours_names() == defined
    assert not peer_names() & ours_names()  # the peers' kernels are not ours


def test_jit_names_reads_every_decorator_form(tmp_path):
    (tmp_path / "k.py").write_text(
        "import triton\nfrom triton import jit\n"
        "@triton.jit\ndef a(x): pass\n"
        "@triton.heuristics({})\n@triton.jit(do_not_specialize=[0])\ndef b(x): pass\n"
        "@jit\ndef c(x): pass\n"
        "def launcher(x): pass\n"
        "@other.decorator\ndef d(x): pass\n"
    )
    (tmp_path / "broken.py").write_text("@triton.jit\ndef (:\n")
    assert jit_names(sorted(tmp_path.glob("*.py"))) == {"a", "b", "c"}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("aten::mm", "gemm"),
        ("aten::addmm", "gemm"),
        ("aten::_log_softmax", "elementwise"),
        ("aten::exp", "elementwise"),  # torch's pointwise tag
        ("aten::copy_", "copy"),
        ("aten::fill_", "copy"),
        ("c10d::allreduce_", "collective"),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "gemm"),
        ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x5_tn_align4>(P)", "gemm"),
        ("triton_tem_fused_mm_0", "gemm"),
        ("triton_red_fused__log_softmax_0", "elementwise"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()",
            "copy",
        ),
        ("Memcpy HtoD (Pageable -> Device)", "copy"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "collective"),
        ("_forward_kernel", "ours"),
        ("_lse_epilogue_kernel", "ours"),  # the cuBLAS route's epilogues
        ("_grad_epilogue_kernel", "ours"),
        ("## Call CompiledFxGraph fz74wpinqymxk363ahipxrh2 ##", "elementwise"),  # Inductor, CPU
        ("kernel_cutlass_cross_entropy_0", "peer"),
        ("a_kernel_nobody_knows", "other"),
        ("", "other"),
    ],
)
def test_names_fall_into_their_class(name, expected):
    assert classify(name) == expected


def test_peer_kernels_are_read_from_the_installed_packages(tmp_path, monkeypatch):
    package = tmp_path / "fake_peer"
    (package / "ops").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('never imported')\n")
    (package / "ops" / "ce.py").write_text(
        "import triton\n@triton.jit\ndef _fake_ce_kernel(x): pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from perfsuite.plan import registry

    # The peers' packages are the Triton methods' declared requirements.
    assert registry.triton_packages() == ["liger_kernel", "cut_cross_entropy"]
    monkeypatch.setattr(registry, "triton_packages", lambda: ["fake_peer", "not_installed_peer"])
    peer_names.cache_clear()
    try:
        assert peer_names() == {"_fake_ce_kernel"}
        assert classify("_fake_ce_kernel") == "peer"
    finally:
        peer_names.cache_clear()


def test_kernel_names_shed_types_namespaces_and_parameters():
    long = (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, "
        "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*)"
    )
    assert kernel_name(long) == "cunn_SoftMaxForward"
    assert kernel_name("aten::mm") == "aten::mm"
    assert kernel_name("## Call CompiledFxGraph fz74wpinqymxk363ahipxrh2 ##") == (
        "CompiledFxGraph fz74wpin"
    )
    assert kernel_name("void cutlass::Kernel2<sm80_gemm_x>(sm80_gemm_x::Params)") == "sm80_gemm_x"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_breakdown_counts_kernels_and_the_host(tmp_path):
    fn, setup = linear_ce(4096, 32768, 2048, "cuda", torch.bfloat16)
    setup()
    fn()
    trace = tmp_path / trace_name("eager", "big", "bf16", 0.0, "fwd+bwd")
    breakdown = profile_call(fn, torch.device("cuda"), setup=setup, trace=trace)
    assert breakdown.source == "cuda-kernels"
    assert breakdown.classes["gemm"] > 0.5 * breakdown.device_ms, breakdown
    assert breakdown.launches >= 3
    assert 0 < breakdown.busy_ms <= breakdown.wall_ms
    assert breakdown.host_ms == pytest.approx(breakdown.wall_ms - breakdown.busy_ms)
    with gzip.open(trace, "rt") as src:
        kinds = {ev.get("cat") for ev in json.load(src)["traceEvents"]}
    assert "kernel" in kinds


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_breakdown_finds_our_kernels():
    from perfsuite.kernels import linear_cross_entropy

    e = torch.randn(1024, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    c = torch.randn(8192, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, 8192, (1024,), device="cuda")

    def fn() -> None:
        linear_cross_entropy(e, c, t).backward()

    fn()
    breakdown = profile_call(fn, torch.device("cuda"))
    assert breakdown.classes["ours"] > 0.5 * breakdown.device_ms, breakdown
    assert any(top["class"] == "ours" and top["name"] in ours_names() for top in breakdown.top)
