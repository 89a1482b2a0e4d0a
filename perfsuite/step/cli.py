"""``perfsuite step``: exit 2 for bad input, before anything runs; 1 when no case was
measured; 0 otherwise."""

from __future__ import annotations

import argparse
import functools

from perfsuite.args import (
    add_out_arguments,
    non_negative_int,
    out_file,
    parse_size,
    positive_float,
    positive_int,
    seed_int,
)
from perfsuite.fit import TrimmedConsole
from perfsuite.harness.progress import cell_label
from perfsuite.step.presets import DEFAULT_SIZE, PRESETS


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``perfsuite step``."""
    cpu, cuda = DEFAULT_SIZE["cpu"], DEFAULT_SIZE["cuda"]
    arg = p.add_argument
    models = f"model preset(s), comma-separated: {', '.join(PRESETS)} (default smoke)"
    arg("--model", "--shape", dest="model", default="smoke", help=models)
    layers = f"decoder layers (default CPU {cpu.layers}, CUDA {cuda.layers}; at most the model's)"
    arg("--layers", type=positive_int, help=layers)
    arg("--seq", type=positive_int, help=f"sequence length (CPU {cpu.seq}, CUDA {cuda.seq})")
    arg("--batch", type=positive_int, help=f"sequences a step (CPU {cpu.batch}, CUDA {cuda.batch})")
    # Named by `perfsuite methods` (kinds: step), not here: listing them imports every
    # method, and torch, before a bad argument could be refused.
    arg("--methods", help="comma-separated, of `perfsuite methods`' kind step (default: all)")
    arg("--beta", default="0,0.1", help="label smoothing β, comma-separated")
    arg("--dtype", help="fp32 and/or bf16, comma-separated (default fp32 on CPU)")
    arg("--device", default="auto", choices=["auto", "cuda", "cpu"])
    arg("--samples", type=positive_int, default=10, help="timed steps per case (default 10)")
    arg("--warmup", type=non_negative_int, default=2, help="untimed steps before them (default 2)")
    arg("--seed", type=seed_int, default=0, help="weights' and batch's seed")
    limit = "a worker's memory (e.g. 8G; default: 80%% of the RAM available, or of the GPU): "
    over = "a model estimated over it is a skipped row"
    arg("--memory-limit", type=parse_size, help=limit + over)
    arg("--timeout", type=positive_float, default=3600.0, help="seconds per method's worker")
    add_out_arguments(p, "step-<models>-<device>.json")


def run(args: argparse.Namespace) -> int:
    from perfsuite.harness.command import Checkpoint, command, ended
    from perfsuite.step.plan import build_step_plan
    from perfsuite.step.runner import run_step_plan
    from perfsuite.step.table import print_step_tables

    console = TrimmedConsole(log_path=False)
    plan = build_step_plan(args)
    out = out_file(args.out, "step", "+".join(p.name for p in plan.presets), plan.device)
    checkpoint = Checkpoint(out, overwrite=args.force)  # before anything is measured
    for preset in plan.presets:
        size = plan.sizes[preset.name]
        console.print(
            f"{preset.name}: {size.layers} of {preset.layers} layers, "
            f"{preset.parameters(size.layers) / 1e6:,.1f}M parameters, "
            f"batch {size.batch} x seq {size.seq}",
            highlight=False,
        )
    document = command(
        checkpoint,
        lambda progress, notice: run_step_plan(plan, progress, checkpoint, notice),
        console,
        [(method, case) for method in plan.methods for case in plan.cases()],
        label=functools.partial(cell_label, width=18, tokens=False),
    )
    print_step_tables(document["rows"], console)
    return ended(document, out, console, "case")
