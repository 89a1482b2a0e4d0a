"""``perfsuite step``: one full training step of a transformers model, per loss method.

Bad input (an unknown model, ``--layers 0``, an unwritable ``--out``) is one ``error:``
line and exit 2, before anything runs. Exit 1: no case was measured; 0 otherwise
(unavailable, unsupported and oom rows are recorded, not failures).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from perfsuite.fit import TrimmedConsole
from perfsuite.parser import print_error
from perfsuite.results.results import check_writable, nothing_measured, status_counts, write_results
from perfsuite.step.methods import METHODS
from perfsuite.step.presets import DEFAULT_SIZE, PRESETS

DEFAULT_OUT_DIR = Path("reports") / "runs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``perfsuite step``; numbers are checked by the plan (one-line errors)."""
    p.add_argument(
        "--model",
        "--shape",
        dest="model",
        default="smoke",
        help=f"model preset(s), comma-separated: {', '.join(PRESETS)} (default smoke)",
    )
    cpu, cuda = DEFAULT_SIZE["cpu"], DEFAULT_SIZE["cuda"]
    p.add_argument(
        "--layers",
        help=f"decoder layers (default {cpu.layers} on CPU, {cuda.layers} on CUDA, at most "
        "the model's)",
    )
    p.add_argument("--seq", help=f"sequence length (default {cpu.seq} on CPU, {cuda.seq} on CUDA)")
    p.add_argument("--batch", help=f"sequences a step (default {cpu.batch} CPU, {cuda.batch} CUDA)")
    p.add_argument("--methods", help=f"comma-separated, of {', '.join(METHODS)} (default: all)")
    p.add_argument("--beta", default="0,0.1", help="label smoothing β, comma-separated")
    p.add_argument("--dtype", help="fp32 and/or bf16, comma-separated (default fp32 on CPU)")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--samples", default="10", help="timed steps per case (default 10)")
    p.add_argument("--warmup", default="2", help="untimed steps before them (default 2)")
    p.add_argument("--seed", default="0", help="weights' and batch's seed")
    p.add_argument(
        "--memory-limit",
        help="a worker's memory (e.g. 8G; default: 80%% of the RAM available, or of the GPU); "
        "a model estimated over it is an oom row",
    )
    p.add_argument("--timeout", default="3600", help="seconds per method's worker")
    p.add_argument(
        "--out",
        type=Path,
        help=f"results file (default: {DEFAULT_OUT_DIR}/<time>-step-<models>-<device>.json)",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file")


def run(args: argparse.Namespace) -> int:
    from perfsuite.step.plan import build_step_plan
    from perfsuite.step.runner import run_step_plan
    from perfsuite.step.table import print_step_tables

    console = TrimmedConsole(log_path=False)
    plan = build_step_plan(args)
    out = args.out
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        names = "+".join(p.name for p in plan.presets)
        out = DEFAULT_OUT_DIR / f"{stamp}-step-{names}-{plan.device}.json"
    check_writable(out, overwrite=args.force)  # before anything is measured
    for preset in plan.presets:
        size = plan.sizes[preset.name]
        console.print(
            f"{preset.name}: {size.layers} of {preset.layers} layers, "
            f"{preset.parameters(size.layers) / 1e6:,.1f}M parameters, "
            f"batch {size.batch} x seq {size.seq}",
            highlight=False,
        )
    kept = [0]

    def checkpoint(document: dict[str, Any]) -> None:
        write_results(out, document)
        kept[0] = len(document["rows"])

    def progress(method: str, case: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        statuses = ",".join(sorted({r["status"] for r in rows}))
        console.log(
            f"{method:<18} {case['shape']} {case['dtype']} β={case['beta']:g}: {statuses}",
            highlight=False,
        )

    try:
        document = run_step_plan(plan, progress, checkpoint)
    except KeyboardInterrupt:
        if kept[0]:
            console.print(f"[red]interrupted[/red]: {kept[0]} finished row(s) kept in {out}")
        raise
    write_results(out, document)
    print_step_tables(document["rows"], console)
    console.print(f"results: {out}", soft_wrap=True)
    if nothing_measured(document["rows"]):
        print_error(f"no case was measured ({status_counts(document['rows'])})")
        return 1
    return 0
