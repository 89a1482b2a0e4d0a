"""Command-line arguments shared by ``perfsuite run`` and ``perfsuite sweep``:
what is measured and how, as opposed to which shapes (each command's own)."""

from __future__ import annotations

import argparse
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfsuite.results.kinds import TIMERS
from perfsuite.results.results import PHASES

# Where a results file goes without --out: git ignores it.
DEFAULT_OUT_DIR = Path("reports") / "runs"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``512M``, ``2GiB``, ``1048576`` -> bytes."""
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 2G)")
    value, unit = match.groups()
    scale = 1024 ** ("KMGT".index(unit.upper()) + 1) if unit else 1
    return int(float(value) * scale)


def int_between(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` (to ``high``), else one line saying so."""
    bound = "positive" if low == 1 else f"{low} or more"
    bound = bound if high is None else f"between {low} and {high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


positive_int = int_between(1)
non_negative_int = int_between(0)  # a count that may be 0 (``--warmup``)
SEED_MAX = 2**32 - 1


def seed_int(text: str) -> int:
    """A seed torch's and numpy's generators both take (0 to 2**32 - 1)."""
    value = non_negative_int(text)
    if value > SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be at most {SEED_MAX} (2**32 - 1), got {value}")
    return value


def finite_float(zero_ok: bool) -> Callable[[str], float]:
    """An argparse type: a finite number > 0 (>= 0 if ``zero_ok``): NaN or infinity would only
    produce error rows."""
    bound = ">= 0" if zero_ok else "> 0"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
            raise argparse.ArgumentTypeError(f"must be a finite number {bound}, got {text!r}")
        return value

    return parse


positive_float = finite_float(zero_ok=False)
non_negative_float = finite_float(zero_ok=True)  # ``--z-loss``: 0 is off


def level(text: str) -> float:
    """A significance level: a number in (0, 1)."""
    value = positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text!r}")
    return value


def add_measurement_arguments(p: argparse.ArgumentParser) -> None:
    """Methods, β, phases, device, workload, the measurement protocol and ``--tp``."""
    arg = p.add_argument
    arg("--methods", help="comma-separated method names (default: all timed methods)")
    arg("--beta", default="0,0.1", help="label smoothing values β, comma-separated (default 0,0.1)")
    phases = "phases timed, comma-separated (default fwd,bwd,fwd+bwd)"
    arg("--phases", default=",".join(PHASES), help=phases)
    device = "default auto: cuda when there is one"
    arg("--device", default="auto", choices=["auto", "cuda", "cpu"], help=device)
    workload = "random (default), synthetic, or a .safetensors/.pt dump of e, c, targets"
    arg("--workload", help=workload)
    for flag, kind, default, text in (
        ("--entropy", float, None, "synthetic workload: target mean token entropy in nats "
         "(implies synthetic)"),
        ("--zipf", float, None, "synthetic workload: Zipf exponent of the unigram prior "
         "(default 1)"),
        ("--samples", positive_int, 20, "timed samples per phase (default 20, at most 10,000)"),
        ("--warmup", non_negative_int, 3, "untimed warm-up calls per phase (default 3)"),
        ("--seed", seed_int, 0, "inputs' seed, 0 to 2**32 - 1"),
        ("--memory-limit", parse_size, None, "CPU only: cap each worker's extra data memory "
         "(e.g. 2G)"),
        ("--timeout", positive_float, 3600.0, "seconds per method's worker (default 3600)"),
    ):  # fmt: skip
        arg(flag, type=kind, default=default, help=text)
    jobs = "CPU: Triton methods (interpreted, timings flagged) run this many workers at a time "
    jobs += "beside the natively timed ones, stopped while a native clock runs; 1 runs every "
    arg("--jobs", type=positive_int, help=jobs + "worker alone (default: 2 with 2+ cores)")
    timer = "events: CUDA events (CPU clock) around each call, L2 flushed before (default); "
    timer += "graph: one CUDA graph replay per sample; kernels: the device kernels' sum from the "
    arg("--timer", choices=TIMERS, default="events", help=timer + "profiler (docs/run.md#timers)")
    profile = "one extra profiled call per cell and phase after the timed samples: a trace "
    profile += "(gzip JSON for Perfetto) in DIR and a breakdown in the row (report --breakdown)"
    arg("--profile", metavar="DIR", help=profile)
    tp = "tensor-parallel sizes, comma-separated (e.g. 1,2,4): the classifier sharded over V "
    tp += "across that many ranks (gloo on CPU, NCCL with one GPU a rank), with the TP methods "
    arg("--tp", help=tp + "(`perfsuite methods --tp`); docs/scale-out.md")
    collective = "with --tp: seconds any collective may wait before its cell fails (default 300)"
    arg("--collective-timeout", type=positive_float, default=300.0, help=collective)


# ``build_plan``'s keywords, from the options of the same name or, here, of another.
_PLAN_KEYWORDS = ("methods", "phases", "device", "samples", "warmup", "seed", "memory_limit",
                  "jobs", "timer", "profile")  # fmt: skip
_RENAMED = {"betas": "beta", "timeout_s": "timeout", "tps": "tp",
            "collective_timeout_s": "collective_timeout"}  # fmt: skip


def measurement_options(args: argparse.Namespace) -> dict[str, Any]:
    """``build_plan`` keywords from the arguments ``add_measurement_arguments`` defines."""
    names = {**{k: k for k in _PLAN_KEYWORDS}, **_RENAMED}
    return {keyword: getattr(args, name) for keyword, name in names.items()}


def add_out_arguments(
    p: argparse.ArgumentParser,
    name: str,
    what: str = "results file",
    force: str | None = "overwrite an existing --out file",
    beside: str = "",
) -> None:
    """``--out`` (default: ``out_file``'s, ``<time>-`` then ``name``; ``beside``: what
    else goes next to it) and ``--force``."""
    where = f"{what} (default: {DEFAULT_OUT_DIR}/<time>-{name}){beside}"
    p.add_argument("--out", type=Path, help=where)
    if force is not None:
        p.add_argument("--force", action="store_true", help=force)


def out_file(out: Path | None, *words: str) -> Path:
    """``--out``, or a new file under ``DEFAULT_OUT_DIR`` named by the time and ``words``."""
    if out is not None:
        return Path(out)
    return DEFAULT_OUT_DIR / f"{'-'.join([time.strftime('%Y%m%d-%H%M%S'), *words])}.json"
