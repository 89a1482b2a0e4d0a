"""``perfsuite converge``: exit 2 for bad input (before anything trains), 1 when a run
crashed, ran out of memory, diverged or differs from eager, else 0."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from perfsuite.args import (
    add_out_arguments,
    non_negative_float,
    non_negative_int,
    out_file,
    positive_float,
    positive_int,
    seed_int,
)
from perfsuite.converge.presets import DATA_KINDS, PRESETS, REFERENCE
from perfsuite.fit import TrimmedConsole
from perfsuite.plan.plan import parse_betas, parse_dtypes, resolve_methods
from perfsuite.results.kinds import DTYPES

if TYPE_CHECKING:  # both import torch: the parser and its checks need neither
    from perfsuite.converge.sweep import Config
    from perfsuite.method import SimpleMethod


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``perfsuite converge``."""
    arg = parser.add_argument
    presets = "; ".join(
        f"{p.name}: V={p.vocab}, D={p.hidden}, {p.layers} layers, {p.steps} steps of "
        f"{p.batch}x{p.seq} tokens, for {p.target.upper()}"
        for p in PRESETS.values()
    )
    arg("--preset", default="smoke", choices=PRESETS, help=presets)
    methods = f"comma-separated method names; {REFERENCE} (the reference) is always added "
    methods += "(default: the preset's, else the paper table's methods that train, without "
    arg("--methods", help=methods + "those that compile on a CPU: see perfsuite methods)")
    arg("--beta", default="0,0.1", help="label smoothing values, comma-separated")
    arg("--dtype", help=f"comma-separated, of {','.join(DTYPES)} (default: the preset's)")
    arg("--steps", type=positive_int, help="training steps (default: the preset's)")
    z_loss = "train with PaLM's z_loss·lse² added (e.g. 1e-4; default 0). Methods without "
    arg("--z-loss", type=non_negative_float, help=z_loss + "it are recorded as unsupported")
    arg("--seed", type=seed_int, help="model, data and order seed (default 0)")
    batches = "distinct training batches, cycled (0: a fresh batch every step; default: the "
    batches += "preset's). Repeated data makes a model overconfident, as fine-tuning does"
    arg("--train-batches", type=non_negative_int, help=batches)
    data = "bigram (synthetic, true distribution known; default) or text (Python's bundled "
    data += "help pages, BPE-tokenised here; no truth)"
    arg("--data", default="bigram", choices=DATA_KINDS, help=data)
    arg("--device", default="auto", choices=["auto", "cpu", "cuda"])
    jobs = "Triton methods interpreted on CPU at a time (default: 2 on 2+ cores)"
    arg("--jobs", type=positive_int, help=jobs)
    arg("--timeout", type=positive_float, help="seconds one run may take (default: the preset's)")
    add_out_arguments(
        parser, "converge-<preset>-<device>.json", "results JSON", "overwrite existing outputs",
        "; the table (.md) and the plots (-loss, -reliability, -calibration .png) go next to it",
    )  # fmt: skip
    render = "rewrite the table and plots next to a finished results JSON; train nothing"
    arg("--render", metavar="RESULTS", type=Path, help=render)
    dry = "build the data and the model (on the meta device), print the plan, train nothing"
    arg("--dry-run", action="store_true", help=dry)


def resolve(args: argparse.Namespace, known: dict[str, SimpleMethod]) -> Config:
    """Check every argument against the registry ``known``; raise ``PlanError``."""
    from perfsuite.converge.sweep import Config
    from perfsuite.plan.plan import default_jobs, resolve_device

    device = resolve_device(args.device)
    given = {"steps": args.steps, "seed": args.seed, "z_loss": args.z_loss}
    preset = replace(PRESETS[args.preset], **{k: v for k, v in given.items() if v is not None})
    if args.train_batches is not None:
        preset = replace(preset, train_batches=args.train_batches or None)
    dtypes = list(preset.dtypes) if args.dtype is None else parse_dtypes(args.dtype)
    if args.methods is None:
        # The paper table's methods that train, but those that compile on a CPU (inductor
        # costs more than the whole smoke run there).
        cpu = device == "cpu"
        default = [n for n, m in known.items() if m.timed_by_default and not (cpu and m.compiles)]
        methods = [m for m in preset.methods or default if m in known]
    else:
        methods = resolve_methods(args.methods, "train")
    return Config(
        preset=preset,
        methods=[REFERENCE, *[m for m in dict.fromkeys(methods) if m != REFERENCE]],
        betas=parse_betas(args.beta),
        dtypes=dtypes,
        device=device,
        out=out_file(args.out, "converge", preset.name, device),
        data=args.data,
        jobs=args.jobs or default_jobs(),
        timeout_s=args.timeout or preset.timeout_s,
    )


def run(args: argparse.Namespace) -> int:
    """The ``perfsuite converge`` command: 0 all same, 1 a failure or difference, 2 bad input."""
    from perfsuite.converge.plots import artifact_paths
    from perfsuite.converge.report import read
    from perfsuite.converge.sweep import dry_run, plan_cells, report, sweep
    from perfsuite.harness.command import Checkpoint, command
    from perfsuite.plan.registry import methods_for

    console = TrimmedConsole()
    if args.render is not None:
        report(args.render, read(args.render), console)
        return 0
    known = methods_for("train")
    config = resolve(args, known)
    if args.dry_run:
        return dry_run(config, known, console)
    # Every output checked before training; the results file held to its last write.
    outputs = artifact_paths(config.out).values()
    checkpoint = Checkpoint(config.out, overwrite=args.force, outputs=outputs)
    p = config.preset
    console.print(
        f"converge {p.name}: {', '.join(config.methods)} x β {config.betas} x {config.dtypes} "
        f"on {config.device}, {p.steps} steps of {p.batch}x{p.seq} tokens, {config.data} data"
        + (f", z-loss {p.z_loss:g}" if p.z_loss else "")
        + f" -> {config.out}",
        highlight=False,
    )
    units = [(cell.method, {}) for cell in plan_cells(config, known)]
    document = command(
        checkpoint,
        lambda progress, notice: sweep(config, known, console, progress, checkpoint),
        console,
        units,
    )
    report(config.out, document, console)
    failed = ("error", "oom", "diverged")
    rows = document["rows"]
    return int(any(r["status"] in failed or r["parity"].get("verdict") == "differs" for r in rows))
