"""A controlled competing CPU load for busy-machine measurements (reports/cpu-busy/).

``python reports/cpu-busy/cpu_load.py --cores 1 --seconds 120`` starts one busy-loop process
per listed core, each pinned to it, and stops them all after ``--seconds`` (or on Ctrl-C or
SIGTERM): a bounded load that cannot outlive the measurement it disturbs. ``--cores 1`` pins
one loop on CPU 1; ``--cores 0,1`` loads both; ``--cores any`` runs one loop the scheduler
may move (as another job's process would be).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import sys
import time


def spin(core: int | None, until: float) -> None:
    """Burn one core (``None``: any) until ``until`` (monotonic), never longer."""
    if core is not None:
        os.sched_setaffinity(0, {core})
    x = 0
    while time.monotonic() < until:
        for _ in range(100_000):
            x += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", default="1", help="CPUs to load, comma-separated")
    parser.add_argument("--seconds", type=float, default=60.0, help="stop after (max 3600)")
    args = parser.parse_args(argv)
    cores = [None if c.strip() == "any" else int(c) for c in args.cores.split(",") if c.strip()]
    until = time.monotonic() + min(max(args.seconds, 0.0), 3600.0)
    procs = [mp.Process(target=spin, args=(core, until), daemon=True) for core in cores]
    for proc in procs:
        proc.start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        for proc in procs:
            proc.join(max(0.0, until - time.monotonic()) + 5)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
