"""``perfsuite`` command line: parses arguments, hands a plan to the runner,
prints the table and writes the results file."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from perfsuite import __version__
from perfsuite.args import (
    add_measurement_arguments,
    measurement_options,
    positive_float,
    positive_int,
)
from perfsuite.fit import TrimmedConsole
from perfsuite.parser import Parser
from perfsuite.plan.plan import PlanError, build_plan
from perfsuite.plan.registry import methods_for
from perfsuite.plan.shapes import PRESETS, get_shape
from perfsuite.results.results import (
    check_writable,
    nothing_measured,
    status_counts,
    write_results,
)

DEFAULT_OUT_DIR = Path("reports") / "runs"


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shape",
        help="preset name(s), comma-separated (see `perfsuite shapes`; default smoke)",
    )
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], help="default: the preset's")
    p.add_argument("--tokens", type=positive_int, help="override N")
    p.add_argument("--vocab", type=positive_int, help="override V")
    p.add_argument("--hidden", type=positive_int, help="override D")
    p.add_argument(
        "--softcap",
        nargs="?",
        const="preset",
        help="apply a logit softcap: the preset's (bare flag) or the given value",
    )
    add_measurement_arguments(p)
    p.add_argument(
        "--out",
        type=Path,
        help=f"results file (default: {DEFAULT_OUT_DIR}/<time>-<shape>-<device>.json)",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file")


def _softcap(args: argparse.Namespace, shapes: list[Any]) -> float | None:
    if args.softcap is None:
        return None
    if args.softcap == "preset":
        caps = {s.softcap for s in shapes}
        if None in caps or len(caps) != 1:
            raise PlanError("--softcap without a value needs presets that define one softcap")
        return caps.pop()
    try:
        return positive_float(args.softcap)
    except argparse.ArgumentTypeError as err:
        raise PlanError(f"--softcap: {err}") from None


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    from perfsuite.plan.workloads import file_shape, parse_workload

    workload = parse_workload(args.workload, args.entropy, args.zipf)
    if workload is not None and workload["kind"] == "file":
        if args.vocab or args.hidden:
            raise PlanError("a file workload fixes V and D; only --tokens (up to its N) applies")
        if args.shape is not None:
            raise PlanError(
                f"--shape {args.shape} with --workload {args.workload}: the file fixes the "
                "shape (N, V, D); drop --shape (--tokens may take fewer of its rows)"
            )
        shapes = [file_shape(workload, args.tokens)]
        softcap = shapes[0].softcap if args.softcap is None else _softcap(args, shapes)
    else:
        text = "smoke" if args.shape is None else args.shape
        names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
        if not names:
            raise PlanError(f"--shape {text!r}: no preset named (see `perfsuite shapes`)")
        shapes = [get_shape(n).with_overrides(args.tokens, args.vocab, args.hidden) for n in names]
        softcap = _softcap(args, shapes)
    plan = build_plan(
        workload=workload,
        shapes=shapes,
        dtype=args.dtype,
        softcap=softcap,
        **measurement_options(args),
    )
    from perfsuite.render.table import print_tables
    from perfsuite.run.runner import run_plan

    out = args.out
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = DEFAULT_OUT_DIR / f"{stamp}-{'+'.join(s.name for s in shapes)}-{plan.device}.json"
    check_writable(out, overwrite=args.force)  # before anything is measured

    total = len(plan.methods) * len(plan.cases())
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    kept: list[int] = [0]

    def checkpoint(doc: dict[str, Any]) -> None:
        write_results(out, doc)
        kept[0] = len(doc["rows"])

    try:
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task(f"{plan.methods[0]}", total=total)

            def progress(method: str, case: dict[str, Any], rows: list[dict[str, Any]]) -> None:
                statuses = ",".join(sorted({r["status"] for r in rows}))
                tp = f" TP={case['tp']}" if case.get("tp") else ""
                bar.console.log(
                    f"{method + tp:<22} {case['shape']} {case['dtype']} β={case['beta']:g}: "
                    f"{statuses}"
                )
                busy = next((r["busy"] for r in rows if r.get("busy")), "")
                if busy:
                    bar.console.log(f"[yellow]warning: busy machine[/yellow] ({busy})")
                bar.update(task, advance=1, description=method)

            # A line per worker and cell start, and while a long cell runs.
            document = run_plan(plan, progress, checkpoint=checkpoint, notice=bar.console.log)
    except KeyboardInterrupt:  # said after the progress bar is gone, or it is erased with it
        if kept[0]:
            console.print(
                f"[red]interrupted[/red]: {kept[0]} finished cell row(s) kept in {out} "
                "(a partial results file: `perfsuite report` reads it)"
            )
        else:
            console.print("[red]interrupted[/red] before any cell finished: nothing written")
        raise
    write_results(out, document)
    if plan.tps:
        from perfsuite.render.tp_table import print_tp_tables

        print_tp_tables(console, document)
    else:
        print_tables(document["rows"], console)
    console.print(f"results: {out}", soft_wrap=True)  # a path stays whole
    if nothing_measured(document["rows"]):
        console.print(f"[red]error:[/red] no cell was measured ({status_counts(document['rows'])})")
        return 1
    return 0


def cmd_shapes(args: argparse.Namespace, console: Console) -> int:
    table = Table(
        title="shape presets",
        caption="softcap: the model's, applied only with --softcap",
    )
    for col in ("name", "tokens N", "vocab V", "hidden D", "dtype", "--softcap"):
        table.add_column(col, justify="left" if col in ("name", "dtype") else "right")
    for s in PRESETS.values():
        table.add_row(
            s.name,
            str(s.tokens),
            str(s.vocab),
            str(s.hidden),
            s.dtype,
            "" if s.softcap is None else f"{s.softcap:g}",
        )
    console.print(table)
    return 0


def cmd_methods(args: argparse.Namespace, console: Console) -> int:
    import torch

    from perfsuite.fit import Column, print_fitted

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    # Method names are identifiers a user types: never folded.
    columns = [Column("method", fold=False), *(Column(f"on {d}") for d in devices)]
    columns += [Column("capabilities"), Column("what it runs")]
    rows = []
    for name, method in methods_for(args.tp).items():
        cells = []
        for device in devices:
            reason = method.availability(device)
            if reason is None:
                interp = " (interpreted)" if device == "cpu" and method.caps.triton else ""
                cells.append(f"[green]available{interp}[/green]")
            else:
                cells.append(f"[yellow]unavailable: {reason}[/yellow]")
        what = (
            method.description if method.timed_by_default else f"(on request) {method.description}"
        )
        rows.append([name, *cells, method.caps.describe(), what])
    options = dict(box=box.SIMPLE_HEAD, pad_edge=False)
    title = "methods across ranks (--tp)" if args.tp else "methods on this machine"
    print_fitted(console, columns, rows, title, **options)
    return 0


# Commands living in their own modules: (name, module, help). Each module exposes
# ``add_arguments(parser)`` and ``run(args) -> int``; it is imported only when its
# command runs or its help is built, so `perfsuite run` never pays for the others.
MODULE_COMMANDS = (
    (
        "sweep",
        "perfsuite.run.cluster",  # sweep's arguments and run, plus --executor (job arrays)
        "measure a grid of (tokens, vocab, hidden, beta); resumable, shardable",
    ),
    (
        "merge",
        "perfsuite.results.merge",
        "join results files (e.g. shards), checking their environments agree",
    ),
    ("report", "perfsuite.render.report", "render the paper table as md, latex, csv or html"),
    ("plot", "perfsuite.render.plot", "PNG plots of memory and time against V and N"),
    (
        "compare",
        "perfsuite.regress.compare",
        "compare two results cell by cell; exit 1 on regression",
    ),
    (
        "baseline",
        "perfsuite.regress.baseline_store",
        "store or list this device's baseline results",
    ),
    (
        "bisect",
        "perfsuite.regress.bisect",
        "find the commit that made a cell slower (git bisect run in a temporary worktree)",
    ),
    (
        "sensitivity",
        "perfsuite.regress.sensitivity",
        "measure the regression detector's false-alarm and detection rates here",
    ),
    (
        "converge",
        "perfsuite.converge.cli",
        "train a tiny LM once per method and beta: parity with eager, calibration",
    ),
    (
        "step",
        "perfsuite.step.cli",
        "one full training step of a transformers model per loss method: fwd, bwd, AdamW",
    ),
    (
        "history",
        "perfsuite.history.cli",
        "keep every run in a SQLite history; find change points and regressions across commits",
    ),
    (
        "dashboard",
        "perfsuite.render.dashboard",
        "write the history as a static site: plots across commits, change points marked",
    ),
    (
        "workload",
        "perfsuite.activations.cli",
        "dump a transformers model's hidden states as a --workload file; train one; inspect one",
    ),
    (
        "filtering",
        "perfsuite.filtering.cli",
        "what gradient filters keep and cost on a workload: tiles, mass, gradient errors",
    ),
    (
        "kernel-report",
        "perfsuite.kernel_report",
        "compile the kernels ahead of time; registers, spills",
    ),
)


DESCRIPTION = (
    "Benchmark linear cross-entropy with label smoothing: our Triton kernel against its "
    "peers, each checked against an fp32 reference, timed, with its peak memory. "
    "Start with `perfsuite run --shape smoke`; exit codes: 0 done, 1 a failure the "
    "command names (a regression, no cell measured), 2 bad input, 130 interrupted."
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="perfsuite", description=DESCRIPTION)  # errors: one line
    parser.add_argument("--version", action="version", version=f"perfsuite {__version__}")
    # dest: a name no subcommand option takes (bisect --command wrote `command`)
    sub = parser.add_subparsers(dest="subcommand", required=True)
    add_run_arguments(sub.add_parser("run", help="measure methods on a shape preset"))
    sub.add_parser("shapes", help="list shape presets")
    methods_p = sub.add_parser(
        "methods", help="list methods with availability and capabilities here"
    )
    methods_p.add_argument(
        "--tp", action="store_true", help="the methods measured across ranks (run --tp)"
    )
    for name, module, help_text in MODULE_COMMANDS:
        importlib.import_module(module).add_arguments(sub.add_parser(name, help=help_text))
    return parser


COMMANDS = {"run": cmd_run, "shapes": cmd_shapes, "methods": cmd_methods}


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM (kill, scancel, a CI timeout) takes Ctrl-C's way out: workers stopped,
    temporary folders removed, the cursor shown again, finished cells kept."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what was typed, for records
    # progress lines: no "cli.py:101" source column; no trailing spaces in a file
    console = TrimmedConsole(log_path=False)
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if on_main_thread else None
    try:
        if args.subcommand in COMMANDS:
            return COMMANDS[args.subcommand](args, console)
        module = next(m for name, m, _ in MODULE_COMMANDS if name == args.subcommand)
        return int(importlib.import_module(module).run(args))
    except (PlanError, ValueError) as err:
        console.print(f"[red]error:[/red] {err}")
        return 2
    except KeyboardInterrupt:  # workers are stopped by then (runner.run_parallel)
        hint = " (sweep --resume picks it up)" if args.subcommand == "sweep" else ""
        console.print(f"[red]interrupted[/red]: perfsuite {args.subcommand} stopped{hint}")
        return 130
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
