"""GPU measurements of the in-house kernel's configs (run by .ci/gpu-run; needs CUDA).

  sweep     forward/backward tile configs timed at Gemma2-2B (random + synthetic)
  slices    the default (slice) backward's tile configs at Gemma2-2B, β = 0.1, softcap 30,
            fwd+bwd: plain and with class weights (whose sm_90a build spills 84 B at the
            pinned 128×128; docs/kernel.md), so the pinned tile is chosen by measurement
  ablation  slices vs tiles: tile list / sort / filter / accum, next to CCE
  tma       the TMA path's candidate configs (kernels/hopper.py) at Gemma2-2B, β = 0.1,
            softcap 30: the forward's alone (fwd), the slice kernel's in fwd+bwd, then
            the fastest pair with its per-kernel times, next to cuBLAS's plain GEMM and
            the portable kernels (PERFSUITE_TMA=0)

Each prints one JSON object per line; none is a pass/fail test (those are
tests/kernels/test_cuda_checks.py, `cuda`-marked). ``--device cpu --shape N,V,D``
rehearses them under Triton's interpreter (TRITON_INTERPRET=1 set before this starts;
``.ci/gpu-run --device cpu`` does): semantics only, one timed call per cell.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from triton.testing import do_bench

from perfsuite.kernels import function, linear_cross_entropy
from perfsuite.kernels.ablations import tiled_linear_cross_entropy
from perfsuite.kernels.configs import KernelConfig, interpreting, use_config

N, V, D = 8192, 256_000, 2304  # Gemma2-2B; --shape changes them
DEVICE = "cuda"


def emit(**row) -> None:
    print(json.dumps(row), flush=True)


def inputs(kind: str, seed: int = 0):
    torch.manual_seed(seed)
    if kind == "synthetic":
        from perfsuite.plan.workloads import synthetic_inputs

        e, c, t, _ = synthetic_inputs(N, V, D, entropy=2.0, seed=seed, device=DEVICE)
    else:
        e = torch.randn(N, D, device=DEVICE)
        c = torch.randn(V, D, device=DEVICE) / D**0.5
        t = torch.randint(0, V, (N,), device=DEVICE)
    return e.bfloat16(), c.bfloat16(), t


# The methods of baselines/ours.py by their options (``tiles``: the atomic-tile ablation,
# kernels/ablations.py), plus the tiles' fp32 dC accumulation.
SETTINGS = {
    "ours (slices)": {},
    "ours-tiles (no filter)": {"tiles": True},
    "ours-tiles-list (mass budget)": {"tiles": True, "filter_eps": "auto"},
    "ours-tiles-sort (CCE-style element filter)": {
        "tiles": True,
        "filter_eps": "auto",
        "tile_list": False,
    },
    "tiles accum-fp32": {"tiles": True, "accum_fp32": True},
}


def loss(e, c, t, tiles: bool = False, **options):
    """Ours: the slice backward, or the tile ablation with ``tiles``."""
    return (tiled_linear_cross_entropy if tiles else linear_cross_entropy)(e, c, t, **options)


def bench(fn, warmup: int, rep: int) -> float:
    """ms: triton's do_bench on the GPU; in the CPU rehearsal one call after one warm-up."""
    if DEVICE == "cuda":
        return do_bench(fn, warmup=warmup, rep=rep)
    fn()
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def time_case(e, c, t, options: dict, phases=("fwd", "fwd+bwd")) -> dict:
    out = {}
    e = e.detach().requires_grad_()
    c = c.detach().requires_grad_()

    def fwd():
        return loss(e, c, t, **options)

    def fwdbwd():
        e.grad = c.grad = None
        fwd().backward()

    if "fwd" in phases:
        out["fwd_ms"] = bench(fwd, warmup=5, rep=40)
    if "fwd+bwd" in phases:
        function.LAST_TILES[0] = None  # the slice backward sets none: no stale tile list
        out["fwdbwd_ms"] = bench(fwdbwd, warmup=3, rep=60)
        tiles = function.LAST_TILES[0]
        out["launched"] = None if tiles is None else tiles.launched_fraction()
    return out


FWD_CONFIGS = [
    KernelConfig(256, 128, 32, 8, 3),
    KernelConfig(128, 128, 32, 8, 3),
    KernelConfig(256, 128, 64, 8, 3),
    KernelConfig(128, 256, 32, 8, 3),
    KernelConfig(128, 256, 64, 8, 3),
    KernelConfig(128, 128, 64, 4, 4),
]
BWD_CONFIGS = [
    KernelConfig(128, 256, 64, 8, 3, block_dd=64),
    KernelConfig(128, 128, 64, 8, 3, block_dd=64),
    KernelConfig(128, 64, 64, 8, 3, block_dd=64),
    KernelConfig(64, 128, 64, 8, 3, block_dd=64),
    KernelConfig(64, 64, 32, 8, 3, block_dd=32),
    KernelConfig(128, 64, 32, 8, 4, block_dd=64),
    KernelConfig(64, 128, 32, 8, 4, block_dd=64),
    KernelConfig(128, 128, 32, 8, 3, block_dd=64),
]


def sweep(kinds: list[str], deadline: float) -> None:
    for kind in kinds:
        e, c, t = inputs(kind)
        fwd_best = None
        for cfg in FWD_CONFIGS:
            if time.time() > deadline:
                return
            try:
                with use_config(forward=cfg):
                    ms = bench(
                        lambda e=e, c=c, t=t: linear_cross_entropy(e, c, t), warmup=5, rep=40
                    )
                emit(sweep="forward", workload=kind, config=cfg.describe(), fwd_ms=ms)
                if fwd_best is None or ms < fwd_best[0]:
                    fwd_best = (ms, cfg)
            except Exception as exc:  # noqa: BLE001 - report and go on
                emit(sweep="forward", workload=kind, config=cfg.describe(), error=str(exc)[:200])
        for cfg in BWD_CONFIGS:
            if time.time() > deadline:
                return
            try:
                with use_config(forward=fwd_best[1], backward=cfg):
                    row = time_case(e, c, t, {}, phases=("fwd+bwd",))
                emit(sweep="backward", workload=kind, config=cfg.describe(), **row)
            except Exception as exc:  # noqa: BLE001
                emit(sweep="backward", workload=kind, config=cfg.describe(), error=str(exc)[:200])


SLICE_CONFIGS = [
    KernelConfig(128, 128, 64, 8, 3),  # pinned on sm_90 (configs._HOPPER_SLICES)
    KernelConfig(128, 128, 32, 8, 3),
    KernelConfig(128, 128, 64, 8, 4),
    KernelConfig(128, 128, 64, 4, 3),
    KernelConfig(128, 64, 64, 8, 3),
    KernelConfig(64, 128, 64, 4, 4),
    KernelConfig(128, 256, 64, 8, 3),  # spills (kernel-report): measured to see the cost
    KernelConfig(256, 128, 64, 8, 3),  # spills too
]
# The weighted variant: the pinned tile against narrower ones that may not spill.
WEIGHTED_CONFIGS = SLICE_CONFIGS[:1] + [SLICE_CONFIGS[4], SLICE_CONFIGS[5]]


def slices(kinds: list[str], deadline: float) -> None:
    """fwd+bwd of the default backward per slice config (the forward's pinned config)."""
    for kind in kinds:
        e, c, t = inputs(kind)
        weight = torch.rand(V, device=DEVICE) + 0.5
        base = {"label_smoothing": 0.1, "softcap": 30.0}
        for variant, configs, options in (
            ("plain", SLICE_CONFIGS, base),
            ("weighted", WEIGHTED_CONFIGS, {**base, "weight": weight}),
        ):
            for cfg in configs:
                if time.time() > deadline:
                    return
                try:
                    with use_config(slices=cfg):
                        row = time_case(e, c, t, options, phases=("fwd+bwd",))
                    emit(sweep="slices", variant=variant, workload=kind,
                         config=cfg.describe(), **row)  # fmt: skip
                except Exception as exc:  # noqa: BLE001 - report and go on
                    emit(sweep="slices", variant=variant, workload=kind,
                         config=cfg.describe(), error=str(exc)[:200])  # fmt: skip


def ablation(kinds: list[str], deadline: float) -> None:
    settings = {
        **SETTINGS,
        "ours-tiles-no-sort (element filter)": {
            "tiles": True, "filter_eps": "auto", "tile_list": False, "sort_vocab": False,
        },
        "ours beta0.1": {"label_smoothing": 0.1},
    }  # fmt: skip
    for kind in kinds:
        e, c, t = inputs(kind)
        for name, options in settings.items():
            if time.time() > deadline:
                return
            emit(ablation=name, workload=kind, **time_case(e, c, t, options))
        try:
            from cut_cross_entropy import linear_cross_entropy as cce

            ee, cc = e.detach().requires_grad_(), c.detach().requires_grad_()

            def step(ee=ee, cc=cc, t=t):
                ee.grad = cc.grad = None
                cce(ee, cc, t).backward()

            emit(ablation="cce", workload=kind,
                 fwd_ms=bench(lambda ee=ee, cc=cc, t=t: cce(ee, cc, t), warmup=5, rep=40),
                 fwdbwd_ms=bench(step, warmup=3, rep=60))  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            emit(ablation="cce", workload=kind, error=str(exc)[:200])


# The TMA path's candidates: (tile N, V, D, warps, stages, flatten). Each build's spills
# under a given Triton: `perfsuite kernel-report` (the pinned ones: none, sm_90a).
TMA_FWD_CONFIGS = [
    KernelConfig(256, 128, 64, 8, 3, flatten=True),  # pinned on sm_90 since 8-tma-candidates
    KernelConfig(256, 128, 64, 8, 2, flatten=False),  # pinned before
    # Two CTAs an SM, one's epilogue beside the other's GEMM (Triton 3.6, sm_90a, β 0.1
    # softcap: 255 registers, no spill, 97 KiB shared).
    KernelConfig(128, 128, 64, 4, 3, flatten=True),
    KernelConfig(128, 128, 64, 8, 4, flatten=True),
    KernelConfig(128, 128, 64, 8, 3, flatten=True),
    KernelConfig(256, 128, 64, 8, 4, flatten=True),
]
TMA_SLICE_CONFIGS = [
    KernelConfig(128, 256, 64, 8, 3, flatten=True),  # pinned on sm_90: loops fused
    KernelConfig(128, 256, 64, 8, 3, flatten=False),  # what 8-tma-candidates timed as "-flat"
    KernelConfig(128, 256, 64, 8, 2, flatten=False),  # pinned before
    # Two CTAs an SM (Triton 3.6, sm_90a, β 0.1 softcap: 255 registers, no spill, 81 KiB
    # shared; at three stages, 113 KiB: one CTA).
    KernelConfig(128, 128, 64, 4, 2, flatten=True),
    KernelConfig(128, 256, 64, 8, 4, flatten=True),
    KernelConfig(128, 128, 64, 8, 4, flatten=True),
]


def kernel_times(fn) -> dict[str, float]:
    """ms per kernel name of one call, from the profiler (CUDA time; {} on CPU)."""
    from torch.profiler import ProfilerActivity, profile

    if DEVICE != "cuda":
        return {}
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for ev in prof.key_averages():
        ms = ev.device_time_total / 1e3 if hasattr(ev, "device_time_total") else 0.0
        if ms > 0.05:
            out[ev.key[:60]] = round(ms, 3)
    return out


def tma(kinds: list[str], deadline: float) -> None:
    """Each TMA candidate timed where it runs, then the fastest forward and slice configs
    together; every row says how far its loss and gradients are from the pinned pair's."""
    import os

    e, c, t = inputs(kinds[0])
    # The Triton route by name: the route table may send "auto" to cuBLAS.
    engine = "triton" if DEVICE == "cuda" else "auto"
    options = {"label_smoothing": 0.1, "softcap": 30.0, "engine": engine}
    flop = 2 * N * V * D
    emit(tma="env", device=torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
         torch=torch.__version__, triton=__import__("triton").__version__)  # fmt: skip
    ms = bench(lambda: torch.mm(e, c.T), warmup=10, rep=200)
    emit(tma="cublas e@c.T bf16", ms=ms, tflops=flop / ms / 1e9)

    def result(**cfgs):
        ee, cc = e.detach().requires_grad_(), c.detach().requires_grad_()
        with use_config(**cfgs):
            loss(ee, cc, t, **options).backward()
            first = (ee.grad.clone(), cc.grad.clone())
            ee.grad = cc.grad = None
            out = loss(ee, cc, t, **options)
            out.backward()
        same = all(torch.equal(a, b) for a, b in zip(first, (ee.grad, cc.grad), strict=True))
        return out.detach(), ee.grad, cc.grad, same

    pinned = result()

    def diffs(got) -> dict:
        return {
            "deterministic": got[3],
            "loss_diff": float((got[0] - pinned[0]).abs().max()),
            "de_diff": float((got[1].float() - pinned[1].float()).abs().max()),
            "dc_diff": float((got[2].float() - pinned[2].float()).abs().max()),
        }

    best: dict[str, tuple[float, KernelConfig]] = {}
    for kernel, configs, phase in (
        ("forward", TMA_FWD_CONFIGS, "fwd"),
        ("slices", TMA_SLICE_CONFIGS, "fwd+bwd"),
    ):
        for cfg in configs:
            if time.time() > deadline:
                return
            row = {"tma": kernel, "config": cfg.describe()}
            try:
                with use_config(**{kernel: cfg}):
                    timed = time_case(e, c, t, options, phases=(phase,))
                row.update(timed, **diffs(result(**{kernel: cfg})))
                ms = timed["fwd_ms" if phase == "fwd" else "fwdbwd_ms"]
                if kernel not in best or ms < best[kernel][0]:
                    best[kernel] = (ms, cfg)
            except Exception as exc:  # noqa: BLE001 - report and go on
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            emit(**row)
    if time.time() > deadline or len(best) < 2:
        return
    cfgs = {k: v[1] for k, v in best.items()}
    ee, cc = e.detach().requires_grad_(), c.detach().requires_grad_()

    def step():
        ee.grad = cc.grad = None
        loss(ee, cc, t, **options).backward()

    with use_config(**cfgs):
        row = time_case(e, c, t, options)
        emit(tma="best pair", **{k: v.describe() for k, v in cfgs.items()}, **row,
             **diffs(result(**cfgs)), kernels=kernel_times(step))  # fmt: skip
    if time.time() > deadline:
        return
    if DEVICE == "cuda":
        cublas = {**options, "engine": "cublas"}

        def cublas_step():
            ee.grad = cc.grad = None
            loss(ee, cc, t, **cublas).backward()

        emit(tma="cublas route", **time_case(e, c, t, cublas),
             kernels=kernel_times(cublas_step))  # fmt: skip
    if time.time() > deadline:
        return
    os.environ["PERFSUITE_TMA"] = "0"
    try:
        emit(tma="portable (PERFSUITE_TMA=0)", **time_case(e, c, t, options),
             kernels=kernel_times(step))  # fmt: skip
    finally:
        del os.environ["PERFSUITE_TMA"]


def main() -> int:
    global N, V, D, DEVICE
    parser = argparse.ArgumentParser()
    steps = ["sweep", "slices", "ablation", "tma"]
    parser.add_argument("steps", nargs="+", choices=steps)
    parser.add_argument("--kinds", default="random,synthetic")
    parser.add_argument("--budget-s", type=float, default=400)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--shape", default=f"{N},{V},{D}", help="N,V,D (default Gemma2-2B)")
    args = parser.parse_args()
    N, V, D = (int(x) for x in args.shape.split(","))
    DEVICE = args.device
    if DEVICE == "cpu" and not interpreting():
        parser.error("--device cpu runs the kernels interpreted: set TRITON_INTERPRET=1")
    deadline = time.time() + args.budget_s
    kinds = args.kinds.split(",")
    for step in args.steps:
        {"sweep": sweep, "slices": slices, "ablation": ablation, "tma": tma}[step](kinds, deadline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
