"""Memory/time curve of ours' slice backward over memory budgets (issue 19, item 2).

    python .ci/budget_curve.py --device cpu --tokens 2048 --vocab 32768 --hidden 1024 \
        --dtype fp32 --budgets 8,16,64,256 --out reports/cpu-slices/budget-curve.json

For each budget: the slice width it buys, fwd+bwd median time over ``--samples`` calls
(after one warm-up), and the peak tensor memory above the inputs (CUDA allocator, or
torch's CPU allocation events), against the floor + N·D·4 + budget the design promises.
Rows are written as they are measured; the machine's load average goes with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from perfsuite.kernels import linear_cross_entropy
from perfsuite.kernels.slices import bytes_per_column, slice_width
from perfsuite.measure.memory import measure_peak
from perfsuite.method import DTYPES
from perfsuite.plan.memory_model import floor_bytes
from perfsuite.results.provenance import collect_env


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=256_000)
    p.add_argument("--hidden", type=int, default=2304)
    p.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--softcap", type=float, default=None)
    p.add_argument("--budgets", default="16,64,256,1024", help="MiB, comma-separated")
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--out", type=Path, required=True)
    return p.parse_args(argv)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    device = torch.device(a.device)
    dtype = DTYPES[a.dtype]
    torch.manual_seed(0)
    n, v, d = a.tokens, a.vocab, a.hidden
    e = (torch.randn(n, d, device=device) / d**0.25).to(dtype).requires_grad_()
    c = (torch.randn(v, d, device=device) / d**0.25).to(dtype).requires_grad_()
    t = torch.randint(0, v, (n,), device=device)
    engine = "triton" if device.type == "cuda" else "torch"
    doc = {
        "what": "ours (slice backward) fwd+bwd over memory budgets",
        "argv": sys.argv if argv is None else argv,
        "shape": {"tokens": n, "vocab": v, "hidden": d, "dtype": a.dtype},
        "beta": a.beta,
        "softcap": a.softcap,
        "engine": engine,
        "floor_bytes": floor_bytes("fwd+bwd", n, v, d, a.dtype),
        "environment": collect_env(device.type, ("torch", "triton")),
        "rows": [],
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    per = bytes_per_column(n, d, dtype, device, engine, a.softcap is not None)
    for mib in (int(x) for x in a.budgets.split(",")):
        budget = mib * 2**20

        def step(budget: int = budget) -> None:
            e.grad = c.grad = None
            loss = linear_cross_entropy(
                e,
                c,
                t,
                label_smoothing=a.beta,
                softcap=a.softcap,
                memory_budget=budget,
                engine=engine,
            )
            loss.backward()

        step()
        _sync(device)
        times = []
        for _ in range(a.samples):
            start = time.perf_counter()
            step()
            _sync(device)
            times.append((time.perf_counter() - start) * 1e3)
        e.grad = c.grad = None
        peak = measure_peak(step, device)
        doc["rows"].append(
            {
                "budget_mib": mib,
                "slice_width": slice_width(v, per, budget),
                "median_ms": statistics.median(times),
                "samples_ms": times,
                "peak_bytes": peak.delta,
                "promised_bytes": doc["floor_bytes"] + n * d * 4 + budget,
                "loadavg": os.getloadavg(),
            }
        )
        a.out.write_text(json.dumps(doc, indent=1))
        row = doc["rows"][-1]
        print(
            f"budget {mib:>5} MiB  width {row['slice_width']:>6}  {row['median_ms']:9.1f} ms  "
            f"peak {row['peak_bytes'] / 2**20:8.1f} MiB (promised ≤ "
            f"{row['promised_bytes'] / 2**20:.1f})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
