"""``perfsuite`` command line: imports only the typed subcommand's module (``perfsuite
--help`` and ``perfsuite shapes`` import no torch); bad input is one ``error:`` line, exit 2;
Ctrl-C or SIGTERM, from the first instant ``main`` runs (rich and the rest load inside it),
exit 130 without a traceback."""

from __future__ import annotations

import argparse
import functools
import importlib
import signal
import sys
import threading
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from perfsuite import __version__
from perfsuite.parser import DESCRIPTION, MODULE_COMMANDS, Parser, print_error

if TYPE_CHECKING:
    from rich.console import Console


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    from perfsuite.args import (
        add_measurement_arguments,
        add_out_arguments,
        positive_float,
        positive_int,
    )
    from perfsuite.run.sweep_args import add_attempt_all

    arg = p.add_argument
    arg("--shape", help="preset name(s), comma-separated (see `perfsuite shapes`; default smoke)")
    arg("--dtype", choices=["bf16", "fp16", "fp32"], help="default: the preset's")
    arg("--tokens", type=positive_int, help="override N")
    arg("--vocab", type=positive_int, help="override V")
    arg("--hidden", type=positive_int, help="override D")
    softcap = "apply a logit softcap: the preset's (bare flag) or the given value"
    # The bare flag's const is True: argparse would pass a str const through ``type``.
    arg("--softcap", nargs="?", const=True, type=positive_float, help=softcap)
    add_measurement_arguments(p)
    add_out_arguments(p, "<shape>-<device>.json")
    add_attempt_all(p, "(else a skipped row each)")


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    from perfsuite.args import measurement_options, out_file
    from perfsuite.harness.command import Checkpoint, command, ended
    from perfsuite.harness.progress import cell_label
    from perfsuite.plan.plan import PlanError, build_plan, parse_list
    from perfsuite.plan.shapes import get_shape
    from perfsuite.plan.workloads import file_shape, parse_workload
    from perfsuite.run import runner

    workload = parse_workload(args.workload, args.entropy, args.zipf)
    from_file = workload is not None and workload["kind"] == "file"
    if from_file:
        if args.shape is not None:
            raise PlanError(
                f"--shape {args.shape} with --workload {args.workload}: the file fixes the "
                "shape (N, V, D); drop --shape (--tokens may take fewer of its rows)"
            )
        shapes = [file_shape(workload, args.tokens, args.vocab, args.hidden)]
    else:
        text = "smoke" if args.shape is None else args.shape
        names = dict.fromkeys(parse_list(text, "shape"))
        shapes = [get_shape(n).with_overrides(args.tokens, args.vocab, args.hidden) for n in names]
    softcap = args.softcap  # a value argparse checked; the bare flag: the presets' one
    if softcap is True:
        caps = {s.softcap for s in shapes}
        if None in caps or len(caps) != 1:
            raise PlanError("--softcap without a value needs presets that define one softcap")
        softcap = caps.pop()
    elif softcap is None and from_file:
        softcap = shapes[0].softcap  # the file's own
    extra = measurement_options(args)
    plan = build_plan(workload=workload, shapes=shapes, dtype=args.dtype, softcap=softcap, **extra)
    out = out_file(args.out, "+".join(s.name for s in shapes), plan.device)
    checkpoint = Checkpoint(out, overwrite=args.force)  # before anything is measured

    document = command(
        checkpoint,
        lambda progress, notice: runner.run_plan(
            plan, progress, checkpoint, notice, args.attempt_all
        ),
        console,
        [(method, case) for method in plan.methods for case in plan.cases()],
        label=functools.partial(cell_label, tokens=False),
    )
    if plan.tps:
        from perfsuite.render.tp_table import print_tp_tables

        print_tp_tables(console, document)
    else:
        from perfsuite.render.table import print_tables

        print_tables(document["rows"], console)
    return ended(document, out, console)


def cmd_shapes(args: argparse.Namespace, console: Console) -> int:
    from perfsuite.fit import Column, print_fitted
    from perfsuite.plan.shapes import PRESETS

    headers = ("name", "tokens N", "vocab V", "hidden D", "dtype", "--softcap")
    columns = [Column(h, "left" if h in ("name", "dtype") else "right") for h in headers]
    rows = []
    for s in PRESETS.values():
        cap = "" if s.softcap is None else f"{s.softcap:g}"
        rows.append([s.name, str(s.tokens), str(s.vocab), str(s.hidden), s.dtype, cap])
    caption = "softcap: the model's, applied only with --softcap"
    print_fitted(console, columns, rows, "shape presets", caption=caption)
    return 0


def _available(method: Any, device: str) -> str:
    """``methods``' cell for one device: available (interpreted), or why not; a softcap it
    declares but cannot apply there (Liger's under the interpreter) is said too."""
    from rich.markup import escape

    from perfsuite.method import DTYPES, Case

    reason = method.availability(device)
    if reason is not None:
        return f"[yellow]unavailable: {escape(reason)}[/yellow]"
    text = "available" + (" (interpreted)" if device == "cpu" and method.caps.triton else "")
    if method.caps.softcap:  # the question ``run`` asks of a softcap case there
        dtype = next(d for d in DTYPES if d in method.caps.dtypes)
        case = Case(tokens=64, vocab=64, hidden=64, dtype=dtype, softcap=30.0, device=device)
        gap = method.unsupported_reason(case)
        if gap is not None:
            return f"[yellow]{text}; unsupported: {escape(gap)}[/yellow]"
    return f"[green]{text}[/green]"


def cmd_methods(args: argparse.Namespace, console: Console) -> int:
    import torch
    from rich import box

    from perfsuite.fit import Column, print_fitted
    from perfsuite.plan.registry import methods_for

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    # Method names are identifiers a user types: never folded.
    columns = [Column("method", fold=False), *(Column(f"on {d}") for d in devices)]
    columns += [Column("kinds"), Column("capabilities"), Column("what it runs")]
    listed = methods_for("tp" if args.tp else "loss")
    rows = []
    # The default set first (what `run` measures without --methods), then the rest.
    for name, method in sorted(listed.items(), key=lambda item: not item[1].timed_by_default):
        what = method.description if method.timed_by_default else f"(by name) {method.description}"
        cells = [_available(method, device) for device in devices]
        rows.append([name, *cells, ", ".join(method.kinds), method.caps.describe(), what])
    title = "methods across ranks (--tp)" if args.tp else "methods on this machine"
    console.print(
        "The default set (run and sweep without --methods) comes first: ours and each peer, "
        "one row each; the rest, marked (by name), are ablations and variants: name them, "
        "or --methods all. kinds: where a method can be measured (loss: run; tp: run --tp; "
        "step: perfsuite step; train: converge).\n"
    )
    print_fitted(console, columns, rows, title, box=box.SIMPLE_HEAD, pad_edge=False)
    return 0


Command = Callable[[argparse.Namespace, "Console"], int]
# Commands defined here: name -> (help, add its arguments, run it).
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Command]] = {
    "run": ("measure methods on a shape preset", add_run_arguments, cmd_run),
    "shapes": ("list shape presets", lambda p: None, cmd_shapes),
    "methods": (
        "list methods with availability and capabilities here",
        lambda p: p.add_argument(
            "--tp", action="store_true", help="the methods measured across ranks (run --tp)"
        ),
        cmd_methods,
    ),
}


def _module(name: str) -> Any:
    """The module of a command in ``MODULE_COMMANDS``, imported now."""
    module = next(m for n, m, _ in MODULE_COMMANDS if n == name)
    return importlib.import_module(f"perfsuite.{module}")


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand; only ``commands`` get their arguments (their modules
    imported), the others the one-line help the top ``--help`` and its errors show."""
    parser = Parser(prog="perfsuite", description=DESCRIPTION)  # errors: one line
    parser.add_argument("--version", action="version", version=f"perfsuite {__version__}")
    # dest: a name no subcommand option takes (bisect --command wrote `command`); metavar:
    # the usage line names COMMAND, not every choice (162 columns); the list names each
    sub = parser.add_subparsers(
        dest="subcommand", metavar="COMMAND", title="commands", required=True
    )
    for name, (help_text, add_arguments, _) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        if commands is None or name in commands:
            add_arguments(p)
    for name, _, help_text in MODULE_COMMANDS:
        p = sub.add_parser(name, help=help_text)
        if commands is None or name in commands:
            _module(name).add_arguments(p)
    return parser


def _interrupted(command: str | None, hint: str = "") -> int:
    from perfsuite.fit import TrimmedConsole

    name = f"perfsuite {command}" if command else "perfsuite"
    TrimmedConsole().print(f"[red]interrupted[/red]: {name} stopped{hint}")
    return 130


def main(argv: list[str] | None = None) -> int:
    on_main_thread = threading.current_thread() is threading.main_thread()
    # First: SIGTERM (kill, scancel, a CI timeout) takes Ctrl-C's way out (workers stopped,
    # temporary folders removed, finished cells kept), even while the modules load.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler) if on_main_thread else None
    argv = list(sys.argv[1:] if argv is None else argv)
    # The subcommand: the first word not an option (--help and --version take no value).
    command = next((word for word in argv if not word.startswith("-")), None)
    try:
        # Parsing imports the command's modules (torch, for some: seconds under load).
        args = build_parser([] if command is None else [command]).parse_args(argv)
        args.argv = argv  # what was typed, for records
        from perfsuite.fit import TrimmedConsole

        # progress lines: no "cli.py:101" source column; no trailing spaces in a file
        console = TrimmedConsole(log_path=False)
        try:
            if args.subcommand in COMMANDS:
                return COMMANDS[args.subcommand][2](args, console)
            return int(_module(args.subcommand).run(args))
        # Bad input raised anywhere under a command, printed here only: every class for it
        # (PlanError, ResultsError, OutputPathError, WorkloadError, ...) is a ValueError.
        except ValueError as err:
            print_error(err)
            return 2
        except KeyboardInterrupt:  # workers are stopped by then (runner.run_parallel)
            from perfsuite.harness.scratch import remove_own

            remove_own()
            hint = " (sweep --resume picks it up)" if args.subcommand == "sweep" else ""
            return _interrupted(args.subcommand, hint)
    except KeyboardInterrupt:  # before the command ran: nothing started, nothing to keep
        return _interrupted(command)
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":  # python -m perfsuite.cli works as python -m perfsuite does
    raise SystemExit(main())
