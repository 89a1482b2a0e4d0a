"""How much of the backward the tile list launches on a workload's first rows at the shape's
V and D: the tile-list kernels run interpreted in a child with each arch's shipped tiles, on
row statistics from fp32 torch logits (the forward is too slow interpreted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import torch

from perfsuite.harness.progress import NoticeFn

from .launches import DTYPES, GPUS, Shape, cfg_arch


@torch.no_grad()
def measure(shape: Shape, archs: list[str], workload: str, rows: int) -> list[dict[str, Any]]:
    """Per arch: launched pairs / all pairs of the sample (must run interpreted on a CPU)."""
    from perfsuite.kernels import tiles
    from perfsuite.kernels.backward import default_filter_eps
    from perfsuite.kernels.configs import PINNED
    from perfsuite.method import Case
    from perfsuite.plan.workloads import DEFAULT_ENTROPY, DEFAULT_ZIPF
    from perfsuite.run.inputs import make_inputs

    dtype = DTYPES[shape.dtype]
    # The inputs ``perfsuite run`` makes (seed 0), ``rows`` of them.
    case = Case(rows, shape.v, shape.d, shape.dtype, shape.beta, shape.softcap or None)
    synthetic = {"kind": "synthetic", "entropy": DEFAULT_ENTROPY, "zipf": DEFAULT_ZIPF}
    made = make_inputs(case, workload=synthetic if workload == "synthetic" else None)
    z = made.e.float() @ made.c.float().T  # the logits, softcapped, in fp32
    if shape.softcap:
        z = shape.softcap * torch.tanh(z / shape.softcap)
    row_max = z.max(dim=1).values
    log_sum = torch.log(torch.exp(z - row_max[:, None]).sum(dim=1))
    g = torch.full((rows,), 1.0 / rows)
    eps = default_filter_eps(dtype)
    out = []
    for arch in archs:
        fwd, bwd = PINNED["forward", arch, shape.dtype], PINNED["backward", arch, shape.dtype]
        tiled = torch.nn.functional.pad(z, (0, -z.shape[1] % fwd.block_v), value=-torch.inf)
        tile_lse = torch.logsumexp(tiled.view(rows, -1, fwd.block_v), dim=2).to(torch.bfloat16)
        extra = bwd.block_v * shape.beta / shape.v if shape.softcap else 0.0
        tau = tiles.row_thresholds(
            tile_lse, row_max, log_sum, filter_eps=eps, extra=extra, dtype=dtype
        )
        listed = tiles.build_tile_list(
            tile_lse, fwd.block_v, row_max, log_sum, g, tau,
            vocab=shape.v, block_n=bwd.block_n, block_v=bwd.block_v, extra=extra,
        )  # fmt: skip
        row = {"arch": arch, "gpu": GPUS[arch][0], "workload": workload, "entropy": made.entropy}
        row |= {"rows": rows, "pairs": listed.total, "launched": int(listed.count.item())}
        row["launched_fraction"] = listed.launched_fraction()
        out.append(row | {"rows_with_tau0": int((tau == 0).sum())})
    return out


def rows(
    shape: Shape, sel: dict[str, Any], cost_rows: list[dict[str, Any]], notice: NoticeFn
) -> list[dict[str, Any]]:
    """Launched fraction per arch × ``--launched`` workload, the backward's costs scaled by
    it: ``measure`` in a child under ``TRITON_INTERPRET=1``, minutes each."""
    workloads, sample = sel["workloads"], sel["sample_rows"]
    keys = sorted({cfg_arch(a) for a in sel["archs"]})
    full = {r["arch"]: r for r in cost_rows if r["impl"] == "ours"}
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = []
    for i, workload in enumerate(workloads, 1):
        n = min(sample, shape.n)
        notice(f"launched fraction: {workload} ({i} of {len(workloads)}), {n} rows at V={shape.v}…")
        job = json.dumps([vars(shape), keys, workload, n])
        cmd = [sys.executable, "-m", "perfsuite.kernel_report.launched", job]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"launched-fraction child failed: {done.stderr.strip()[-1500:]}")
        for row in json.loads(done.stdout):
            cost, frac = full[row["arch"]], row["launched_fraction"]
            scaled = {k: frac * cost[k] for k in ("recompute_gb", "bwd_l2_gb")}
            out.append({**row, "bwd_config": cost["bwd_config"], **scaled})
    return out


if __name__ == "__main__":  # rows' child: its arguments as one JSON list
    shape, archs, workload, rows = json.loads(sys.argv[1])
    print(json.dumps(measure(Shape(**shape), archs, workload, rows)))
