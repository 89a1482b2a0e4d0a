"""Eager and ours on a CPU, quiet and beside a competing load, per OpenMP wait policy
(reports/cpu-busy/).

``python reports/cpu-busy/cpu_busy.py [--blocks 8] [--samples 10]`` measures eager's and
ours' fwd and fwd+bwd at the smoke shape (N=256, V=2048, D=128, fp32, β 0) with the run's
protocol (a cache flush before each sample), in one process per OpenMP setting
(``--policy``; by default libgomp's own, then ``PASSIVE``). Quiet and busy blocks alternate
(ABBA), so both see the same background: in the busy ones a busy loop
(``reports/cpu-busy/cpu_load.py``, on CPU 1 unless ``--load`` says otherwise; stopped with
SIGSTOP in the quiet blocks, killed at the end or at its own time limit) runs. Prints the
medians (ms) and busy/quiet ratios. ``reports/cpu-busy/cpu_busy_runs.py`` measures the same
through ``perfsuite run``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CELLS = ("eager/fwd", "eager/fwd+bwd", "ours/fwd", "ours/fwd+bwd")
# OpenMP settings compared: "default" is none; else VAR=VALUE[,VAR=VALUE] (a bare value
# is OMP_WAIT_POLICY's).
POLICIES = ("default", "PASSIVE")
KINDS = ("quiet", "busy")


def child(blocks: int, samples: int, cores: str) -> None:
    """Measure in this process (its wait policy is its environment's); print JSON."""
    import torch
    import torch.nn.functional as F

    from perfsuite.kernels import linear_cross_entropy
    from perfsuite.measure.timing import CacheFlusher

    torch.manual_seed(0)
    e = torch.randn(256, 128, requires_grad=True)
    c = (torch.randn(2048, 128) / 128**0.5).requires_grad_()
    t = torch.randint(0, 2048, (256,))
    losses = {
        "eager": lambda: F.cross_entropy(e @ c.T, t),
        "ours": lambda: linear_cross_entropy(e, c, t, engine="torch"),
    }
    flush = CacheFlusher(torch.device("cpu"))
    load = subprocess.Popen(
        [sys.executable, str(HERE / "cpu_load.py"), "--cores", cores, "--seconds", "1200"],
        start_new_session=True,
    )
    times: dict[str, dict[str, list[float]]] = {k: {c: [] for c in CELLS} for k in KINDS}
    try:
        for block in range(blocks):
            order = ("quiet", "busy") if block % 2 == 0 else ("busy", "quiet")
            for kind in order:
                os.killpg(load.pid, signal.SIGCONT if kind == "busy" else signal.SIGSTOP)
                time.sleep(0.2)
                for i in range(samples + 1):  # the first of each block warms up
                    for cell in CELLS:
                        method, phase = cell.split("/")
                        e.grad = c.grad = None
                        flush()
                        start = time.perf_counter()
                        loss = losses[method]()
                        if phase == "fwd+bwd":
                            loss.backward()
                        if i:
                            times[kind][cell].append((time.perf_counter() - start) * 1e3)
    finally:
        os.killpg(load.pid, signal.SIGKILL)
        load.wait()
    print(json.dumps(times))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--samples", type=int, default=10, help="per cell and block")
    parser.add_argument(
        "--policy", action="append", help="default, PASSIVE, or VAR=VALUE[,VAR=VALUE] (repeat)"
    )
    parser.add_argument("--load", default="1", help="cpu_load.py --cores (default: 1)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.blocks, args.samples, args.load)
        return 0
    malloc = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
    for policy in args.policy or POLICIES:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
        env |= malloc
        for item in policy.split(",") if policy != "default" else []:
            var, _, value = item.rpartition("=")
            env[var or "OMP_WAIT_POLICY"] = value
        command = [sys.executable, __file__, "--child", "--blocks", str(args.blocks)]
        command += ["--load", args.load]
        out = subprocess.run(
            [*command, "--samples", str(args.samples)], env=env, check=True,
            capture_output=True, text=True,
        ).stdout  # fmt: skip
        times = json.loads(out.strip().splitlines()[-1])
        for cell in CELLS:
            quiet = statistics.median(times["quiet"][cell])
            busy = statistics.median(times["busy"][cell])
            print(
                f"{policy:8} {cell:14} quiet {quiet:8.2f} ms  busy {busy:8.2f} ms  "
                f"busy/quiet {busy / quiet:6.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
