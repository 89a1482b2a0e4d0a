"""``ours`` (the slice backward) on one device: bitwise determinism and the memory/time curve.

  determinism  per β and memory budget, two fwd+bwd runs from the same inputs: the loss and
               every byte of dE and dC compared (counts of differing elements, max |diff|);
               then each budget's gradients against the first budget's (the slice width
               changes the summation order of dE, so those may differ: the numbers say by
               how much).
  curve        per β and budget: fwd+bwd median time (``perfsuite.measure.timing``) and peak
               memory above the inputs (``torch.cuda.max_memory_allocated``; on CPU the
               suite's tensor meter), with the slice width the budget gives.
  sustained    the first β and budget: a fifth of --calls calls with --gap-s idle after
               each, then --calls back to back, each timed; a GPU at its power cap runs the
               second slower (read beside .ci/gpu-run's clocks.csv).

One JSON object per line to ``--out`` (and stdout), written as each cell finishes. Budgets are
MiB. Used by ``.ci/gpu-run`` (steps 2a, 2b, s); runs on CPU too (the rehearsal, engine torch).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from perfsuite.kernels import linear_cross_entropy
from perfsuite.kernels.slices import bytes_per_column, slice_width
from perfsuite.measure.memory import measure_peak
from perfsuite.measure.timing import time_samples
from perfsuite.method import Case
from perfsuite.plan.shapes import get_shape
from perfsuite.run.inputs import make_inputs

MIB = 2**20


class Emitter:
    def __init__(self, out: Path | None) -> None:
        self.file = out.open("a") if out else None

    def __call__(self, **row) -> None:
        text = json.dumps(row)
        print(text, flush=True)
        if self.file:
            self.file.write(text + "\n")
            self.file.flush()


def case_for(args, beta: float) -> Case:
    """The preset's case, with any of --tokens/--vocab/--hidden/--dtype overriding it."""
    s = get_shape(args.shape)
    sizes = [getattr(args, k) or getattr(s, k) for k in ("tokens", "vocab", "hidden", "dtype")]
    return Case(*sizes, beta, s.softcap, args.device)


def fwd_bwd(inputs, case: Case, budget_mib: float) -> torch.Tensor:
    inputs.clear_grads()
    loss = linear_cross_entropy(
        inputs.e, inputs.c, inputs.targets, label_smoothing=case.beta, softcap=case.softcap,
        memory_budget=int(budget_mib * MIB),
    )  # fmt: skip
    loss.backward()
    return loss.detach()


def width_of(inputs, case: Case, budget_mib: float) -> int:
    engine = "triton" if case.device == "cuda" else "torch"
    per = bytes_per_column(case.tokens, case.hidden, inputs.e.dtype, inputs.e.device, engine,
                           case.softcap is not None)  # fmt: skip
    return slice_width(case.vocab, per, int(budget_mib * MIB))


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns as integers of its width (so NaNs compare by bits too)."""
    view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.detach().contiguous().view(view)


def diff(a: torch.Tensor, b: torch.Tensor) -> dict:
    differ = int((_bits(a) != _bits(b)).sum())
    return {
        "identical": differ == 0,
        "elements_differing": differ,
        "elements": a.numel(),
        "max_abs_diff": float((a.float() - b.float()).abs().max()),
        "scale": float(a.float().abs().max()),
    }


def determinism(args, emit: Emitter) -> bool:
    ok = True
    for beta in args.betas:
        case = case_for(args, beta)
        inputs = make_inputs(case, seed=args.seed)
        first: dict[float, tuple] = {}
        for budget in args.budgets:
            runs = []
            for _ in range(2):
                loss = fwd_bwd(inputs, case, budget)
                runs.append((loss.clone(), inputs.e.grad.clone(), inputs.c.grad.clone()))
            (la, ea, ca), (lb, eb, cb) = runs
            same = {"loss": diff(la, lb), "dE": diff(ea, eb), "dC": diff(ca, cb)}
            ok &= all(v["identical"] for v in same.values())
            emit(check="determinism", shape=args.shape, device=args.device, beta=beta,
                 budget_mib=budget, slice_width=width_of(inputs, case, budget), **same)  # fmt: skip
            first[budget] = runs[0]
        ref = args.budgets[0]
        for budget in args.budgets[1:]:
            (la, ea, ca), (lb, eb, cb) = first[ref], first[budget]
            emit(check="across-budgets", shape=args.shape, device=args.device, beta=beta,
                 budget_a_mib=ref, budget_b_mib=budget, loss=diff(la, lb), dE=diff(ea, eb),
                 dC=diff(ca, cb))  # fmt: skip
        del inputs, first, runs
    return ok


def curve_cell(args, case: Case, inputs, budget: float, emit: Emitter) -> None:
    device = torch.device(case.device)

    def step() -> None:
        fwd_bwd(inputs, case, budget)

    timing = time_samples(step, device, samples=args.samples, warmup=args.warmup)
    inputs.clear_grads()
    peak = measure_peak(step, device)
    emit(
        check="curve",
        shape=args.shape,
        device=case.device,
        beta=case.beta,
        budget_mib=budget,
        slice_width=width_of(inputs, case, budget),
        median_ms=timing.median_ms,
        p20_ms=timing.p20_ms,
        p80_ms=timing.p80_ms,
        samples_ms=timing.samples_ms,
        peak_above_inputs_mib=peak.delta / MIB,
        peak_abs_mib=peak.absolute / MIB,
        meter="torch.cuda.max_memory_allocated"
        if device.type == "cuda"
        else "perfsuite CPU tensor meter",
    )


def curve(args, emit: Emitter) -> bool:
    for beta in args.betas:
        case = case_for(args, beta)
        inputs = make_inputs(case, seed=args.seed)
        for budget in args.budgets:
            curve_cell(args, case, inputs, budget, emit)
        del inputs
    return True


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds")


def sustained(args, emit: Emitter) -> bool:
    """Calls with idle gaps, then back to back, timed as the events timer times them
    (``time_samples``), and the UTC span of each mode to read the call's clock log
    (clocks.csv) against. On the H200 ours took 58.5 ms with gaps and 67.5 back to back,
    at its 700 W cap (docs/gpu.md)."""
    case = case_for(args, args.betas[0])
    inputs = make_inputs(case, seed=args.seed)
    device = torch.device(case.device)
    budget = args.budgets[0]

    def idle() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        time.sleep(args.gap_s)

    fwd_bwd(inputs, case, budget)  # compiles and first-call allocations out of the way
    for mode, calls, setup in (
        ("idle-gaps", args.calls // 5, idle),
        ("back-to-back", args.calls, None),
    ):
        idle()
        start = time.time()
        timing = time_samples(
            lambda: fwd_bwd(inputs, case, budget), device, samples=calls, warmup=0, setup=setup
        )
        emit(check="sustained", mode=mode, shape=args.shape, device=case.device, beta=case.beta,
             budget_mib=budget, gap_s=args.gap_s if setup else 0.0, calls=calls,
             median_ms=timing.median_ms, samples_ms=timing.samples_ms, from_utc=_utc(start),
             to_utc=_utc(time.time()))  # fmt: skip
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("check", choices=("determinism", "curve", "sustained"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--shape", help="perfsuite shape preset (default gemma2-2b on cuda, else smoke)")
    for size in ("tokens", "vocab", "hidden"):
        p.add_argument(f"--{size}", type=int, help=f"override the preset's {size}")
    p.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), help="override the preset's")
    p.add_argument("--budgets", default="64,16,1024", help="MiB, comma-separated")
    p.add_argument("--beta", default="0,0.1")
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--calls", type=int, default=150, help="sustained: back-to-back calls")
    p.add_argument("--gap-s", type=float, default=0.3, help="sustained: idle after a call")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    args.shape = args.shape or ("gemma2-2b" if args.device == "cuda" else "smoke")
    args.budgets = [float(b) for b in args.budgets.split(",")]
    args.betas = [float(b) for b in args.beta.split(",")]
    emit = Emitter(args.out)
    t0 = time.time()
    ok = {"determinism": determinism, "curve": curve, "sustained": sustained}[args.check](
        args, emit
    )
    emit(check=f"{args.check}-done", ok=ok, seconds=round(time.time() - t0, 1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
