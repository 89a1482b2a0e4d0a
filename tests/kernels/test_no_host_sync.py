"""Ours moves no data between host and device and never waits on the device inside its
forward or backward (issue 44), so the op can be captured by a CUDA graph.

Meta tensors stand in for the GPU: the op's torch ops run on shapes alone under a dispatch
mode that fails on any host↔device copy or host read of a device value; each Triton
launcher is replaced by a recorder that checks its arguments (device tensors or Python
scalars) and that the slice buffers are 16-byte aligned.
"""

from __future__ import annotations

import itertools
import types

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from perfsuite.kernels import cublas_route, forward, op, reductions, slices, targets

aten = torch.ops.aten

# Ops that copy host data in (torch.tensor), or whose result the host must wait for.
_LIFTS = {aten.lift_fresh, aten.lift_fresh_copy, aten.lift}
_SYNCS = {
    aten._local_scalar_dense, aten.item, aten.is_nonzero, aten.equal, aten.allclose,
    aten.nonzero, aten.masked_select, aten.unique_consecutive, aten._unique2,
    aten.unique_dim, aten.repeat_interleave,
}  # fmt: skip
# GEMMs whose operands must start and step on 16-byte boundaries (cuBLAS, TMA).
_GEMMS = {aten.mm, aten.addmm}


class HostTraffic(AssertionError):
    """A host↔device copy or a host sync inside the op."""


def _aligned(t: torch.Tensor) -> bool:
    size = t.element_size()
    steps = [s for s, n in zip(t.stride(), t.shape, strict=True) if s != 1 and n > 1]
    return all(x * size % 16 == 0 for x in [t.storage_offset(), *steps])


class NoHostTraffic(TorchDispatchMode):
    """Fails on any op that would move data between host and device or sync."""

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if packet in _LIFTS:
            raise HostTraffic(f"{func}: a tensor from host data (torch.tensor) copied in")
        if packet in _SYNCS:
            raise HostTraffic(f"{func}: the host waits for a device value")
        tensors = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
        if any(t.device.type == "cpu" for t in tensors):
            raise HostTraffic(f"{func}: reads a host tensor")
        target = kwargs.get("device")
        if tensors and target is not None and torch.device(target).type == "cpu":
            raise HostTraffic(f"{func}: copies device data to the host")
        if packet in _GEMMS and not all(_aligned(t) for t in tensors):
            shapes = [(tuple(t.shape), t.stride(), t.storage_offset()) for t in tensors]
            raise HostTraffic(f"{func}: an operand not 16-byte aligned: {shapes}")
        out = func(*args, **kwargs)
        host_out = any(isinstance(x, torch.Tensor) and x.is_cpu for x in tree_leaves(out))
        if host_out and tensors:  # device inputs (host ones failed above), a host output
            raise HostTraffic(f"{func}: copies device data to the host")
        return out


class Launcher:
    """Stands in for ``kernel[grid](...)``: records the launch, checks its arguments."""

    def __init__(self, name: str, calls: list) -> None:
        self.name, self.calls = name, calls

    def __getitem__(self, grid):
        def launch(*args, **meta):
            for i, a in enumerate([*args, *meta.values()]):
                if isinstance(a, torch.Tensor):
                    if a.device.type != "meta":
                        where = f"{self.name} argument {i}"
                        raise HostTraffic(f"{where}: a {a.device} tensor, not the device's")
                elif not (a is None or isinstance(a, (bool, int, float))):
                    raise HostTraffic(f"{self.name} argument {i}: {type(a).__name__}")
            size = grid(meta) if callable(grid) else grid
            self.calls.append((self.name, args, size))

        return launch


def _no_sync(*_args, **_kwargs):
    raise HostTraffic("torch.cuda.synchronize inside the op")


def _on_host_only(make, position: int | None = None):
    """``torch.tensor``-like constructors, refused onto a device: a meta tensor is built
    without dispatch (no data to copy), so the mode alone would not see it; on a GPU it is
    a pageable host-to-device copy and a stream sync."""

    def guarded(*args, **kwargs):
        device = kwargs.get("device")
        if position is not None and len(args) > position:
            device = args[position]
        if device is not None and torch.device(device).type != "cpu":
            raise HostTraffic(f"{make.__name__}(..., device={device}): host data copied in")
        return make(*args, **kwargs)

    return guarded


@pytest.fixture
def launches(monkeypatch) -> list:
    """The device as a GPU would see it: Triton launchers recorded, CUDA-only choices
    taken (splits over the vocabulary, the fp32-output GEMM), the interpreter off."""
    calls: list = []
    monkeypatch.setattr(forward, "_forward", Launcher("forward", calls))
    monkeypatch.setattr(slices, "_grad_slice", Launcher("grad_slice", calls))
    monkeypatch.setattr(reductions, "_column_sum_kernel", Launcher("column_sum", calls))
    monkeypatch.setattr(targets, "_target_logit_kernel", Launcher("target_logit", calls))
    monkeypatch.setattr(cublas_route, "_lse_epilogue_kernel", Launcher("lse_epilogue", calls))
    monkeypatch.setattr(cublas_route, "_grad_epilogue_kernel", Launcher("grad_epilogue", calls))
    monkeypatch.setattr(torch.cuda, "synchronize", _no_sync)
    monkeypatch.setattr(torch, "tensor", _on_host_only(torch.tensor))  # device: keyword
    monkeypatch.setattr(torch, "as_tensor", _on_host_only(torch.as_tensor, 2))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.delenv("PERFSUITE_AUTOTUNE", raising=False)
    monkeypatch.delenv("PERFSUITE_DEBUG", raising=False)
    return calls


N, V, D = 300, 1000, 64
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
CASES = [
    dict(dtype=dt, beta=beta, softcap=cap, weight=w, reduction=red, z_loss=z, return_lse=lse)
    for (dt, beta, cap, w), red, z, lse in zip(
        itertools.product(DTYPES, (0.0, 0.1), (None, 30.0), (False, True)),
        itertools.cycle(("mean", "sum", "none")),
        itertools.cycle((0.0, 1e-4, 1e-4, 0.0)),
        itertools.cycle((False, True)),
    )
]


def _run_op(case: dict, budget: int | None, engine: str = "triton", vocab: int = V) -> None:
    """The custom op's forward, then its backward, on meta tensors under the mode."""
    dt, beta, cap = case["dtype"], case["beta"], case["softcap"]
    e = torch.empty(N, D, dtype=dt, device="meta")
    c = torch.empty(vocab, D, dtype=dt, device="meta")
    t = torch.empty(N, dtype=torch.long, device="meta")
    w = torch.empty(vocab, device="meta") if case["weight"] else None
    options = (beta, cap, -100, case["reduction"], case["z_loss"], engine, budget)
    # The ops' Python bodies: called through the dispatcher, meta tensors get the fake
    # implementations (shapes only) instead.
    forward_body = op.lce_forward._init_fn
    backward_body = op.lce_backward._init_fn
    with NoHostTraffic():
        loss, lse, row_max, log_sum = forward_body(e, c, t, w, *options)
        grad_loss = torch.ones_like(loss)
        grad_lse = torch.ones_like(lse) if case["return_lse"] else None
        de, dc = backward_body(e, c, t, w, row_max, log_sum, grad_loss, grad_lse, *options)
    assert (de.shape, de.dtype, dc.shape, dc.dtype) == (e.shape, dt, c.shape, dt)
    assert loss.shape == ((N,) if case["reduction"] == "none" else ())


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c.values())))
def test_op_forward_and_backward_stay_on_the_device(case, launches, monkeypatch):
    """Every option on the default path (split, slices, Triton): β 0 and 0.1, softcap on
    and off, fp16's σ rescaling, class weights, z-loss, the returned LSE, each reduction,
    one vocab split or several, with cuBLAS's fp32-output GEMM or the upcast fallback; the
    first with a budget of 3 grains' workspace: cdiv(V, 384) slices, evened to 384 columns."""
    index = CASES.index(case)
    fp32_out, splits = index // 2 % 2 == 0, 1 + 2 * (index % 3 == 0)
    monkeypatch.setattr(slices, "_fp32_out_mm", lambda device: fp32_out)
    monkeypatch.setattr(forward, "choose_splits", lambda *args, **kwargs: splits)
    per = slices.bytes_per_column(N, D, case["dtype"], torch.device("meta"), "triton", False)
    budget = 3 * slices.WIDTH_GRAIN * per if index == 0 else None
    _run_op(case, budget=budget)
    names = [name for name, _, _ in launches]
    smoothing_by_cbar = case["beta"] > 0 and case["softcap"] is None
    assert names[: 2 + smoothing_by_cbar] == (
        ["column_sum"] * smoothing_by_cbar + ["forward", "target_logit"]
    )
    (_, _, (_, grid_splits)) = next(x for x in launches if x[0] == "forward")
    assert grid_splits == splits
    width = slices.slice_width(V, per, budget)
    starts = [args[14] for name, args, _ in launches if name == "grad_slice"]
    assert starts == list(range(0, V, width))  # every slice, in order
    assert budget is None or starts == [0, 384, 768]
    for name, args, _ in launches:
        if name == "grad_slice":
            out = args[10]  # the slice buffer G: its rows and its start 16-byte aligned
            assert out.shape[1] == min(width, V - args[14])
            assert out.stride(0) % slices.WIDTH_GRAIN == 0 and _aligned(out)


def test_value_checks_queue_after_the_forward_launch(launches, monkeypatch):
    """On a device the targets' and weights' checks are queued asserts: they follow the
    forward kernel's launch, so the device does not idle through their host time first."""
    for name in ("check_targets_in_range", "check_weight_values"):
        monkeypatch.setattr(op, name, lambda *a, name=name: launches.append((name, a, None)))
    _run_op(CASES[3], budget=None)  # with class weights
    names = [name for name, _, _ in launches]
    assert names.index("forward") < names.index("check_targets_in_range")
    assert names.index("forward") < names.index("check_weight_values")


def test_detects_a_host_copy_and_a_sync(launches):
    """The mode is not blind: ``torch.tensor`` onto the device and ``.item()`` both fail."""
    x = torch.empty(4, device="meta")
    with NoHostTraffic(), pytest.raises(HostTraffic, match="host data"):
        torch.tensor(float(V), device=x.device)
    with NoHostTraffic(), pytest.raises(HostTraffic, match="waits"):
        bool(x.sum() > 0)
    with NoHostTraffic(), pytest.raises(HostTraffic, match="host tensor"):
        x.add_(torch.ones(4))
    with NoHostTraffic(), pytest.raises(HostTraffic, match="to the host"):
        x.cpu()
    with NoHostTraffic(), pytest.raises(HostTraffic, match="aligned"):
        torch.mm(torch.empty(4, 9, device="meta")[:, 1:], torch.empty(8, 4, device="meta"))
    with pytest.raises(HostTraffic, match="a cpu tensor"):
        Launcher("k", [])[(1,)](torch.ones(2))
    with pytest.raises(HostTraffic, match="Namespace"):
        Launcher("k", [])[(1,)](types.SimpleNamespace())


@pytest.mark.parametrize("case", CASES[::3], ids=lambda c: "-".join(map(str, c.values())))
def test_cublas_route_stays_on_the_device(case, launches, monkeypatch):
    """The other route (engine="cublas", an ablation until a GPU picks it): the same."""
    monkeypatch.setattr(slices, "_fp32_out_mm", lambda device: True)
    _run_op(case, budget=None, engine="cublas")
    names = [name for name, _, _ in launches]
    per = slices.bytes_per_column(N, D, case["dtype"], torch.device("meta"), "cublas", False)
    count = -(-V // slices.slice_width(V, per, None))
    assert names.count("lse_epilogue") == names.count("grad_epilogue") == count


def test_cublas_route_keeps_an_odd_last_slice_aligned(launches, monkeypatch):
    """A last slice of an odd width (1,001 = 7 × 128 + 105) still steps on 16-byte rows:
    the mode refuses any GEMM whose operand is not."""
    monkeypatch.setattr(slices, "_fp32_out_mm", lambda device: True)
    case = dict(CASES[0], dtype=torch.bfloat16)
    per = slices.bytes_per_column(N, D, torch.bfloat16, torch.device("meta"), "cublas", False)
    _run_op(case, budget=slices.WIDTH_GRAIN * per, engine="cublas", vocab=1001)
    assert [a[13] for name, a, _ in launches if name == "grad_epilogue"][-1] == 105
