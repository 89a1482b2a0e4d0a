"""``history add|import|list|check|ack|sensitivity|demo``. Exit codes: 0 fine; 1 ``check``
found an open regression; 2 bad input, with a one-line reason on stderr."""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import textwrap
from collections.abc import Iterable
from contextlib import ExitStack, closing
from pathlib import Path

import numpy as np

from perfsuite.args import int_between, non_negative_float
from perfsuite.history import demo, ingest, rules, sensitivity, store
from perfsuite.parser import print_error
from perfsuite.regress.baseline_store import print_listing
from perfsuite.regress.compare import relative
from perfsuite.results.outpath import check_output_dir
from perfsuite.results.results import ResultsError, read_json


def db_option(p: argparse.ArgumentParser, default: str | None = argparse.SUPPRESS) -> None:
    """``--db``, before the subcommand (``history --db X import``) and after it; after it,
    SUPPRESS: an absent one leaves the value given before alone."""
    database = f"history database (default ${store.DB_ENV_VAR} or {store.DEFAULT_DB})"
    p.add_argument("--db", default=default, metavar="PATH", help=database)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommands, on ``parser`` (``perfsuite history``)."""
    db_option(parser, None)
    sub = parser.add_subparsers(dest="history_command", metavar="COMMAND", required=True)
    p = sub.add_parser("add", help="store results files (idempotent; corrupt ones refused)")
    p.add_argument("results", nargs="+", metavar="RESULTS", help="results JSON files")
    p = sub.add_parser("import", help="store every results JSON found below a folder")
    p.add_argument("folder", metavar="DIR")
    p = sub.add_parser("list", help="stored runs, one line each, in time order")
    p = sub.add_parser("check", help="regressions (exit 1 if one is neither recovered nor acked)")
    p.add_argument("--device", default=None, help="only this device name")
    p.add_argument("--metric", choices=store.METRICS, action="append", help="default: both")
    p.add_argument("-v", "--verbose", action="store_true", help="also the changes that are not")
    busy = "keep the times of runs measured on a busy machine (left out by default)"
    p.add_argument("--accept-busy", action="store_true", help=busy)
    p = sub.add_parser("ack", help="acknowledge a regression: CELL/RUN as `check` prints it")
    p.add_argument("regression", metavar="CELL/RUN")
    p.add_argument("--reason", required=True)
    p.add_argument("--metric", choices=store.METRICS, default=None, help="default: both")
    p = sub.add_parser("sensitivity", help="detection and false-alarm rates on synthetic series")
    positive = int_between(1)
    p.add_argument("--trials", type=positive, default=30, help="series per scenario and cell")
    p.add_argument("--cells", type=positive, default=4, help="cells (sample sets) per device kind")
    p.add_argument("--runs", type=int_between(8), default=20, help="runs per series")
    noise = "default: estimated from the db (0.01: 1 %%)"
    p.add_argument("--run-noise", type=non_negative_float, default=None, help=noise)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("demo", help="write a synthetic history with a known step, to try the tools")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="folder for the results files")
    runs = int_between(4, demo.MAX_RUNS)  # a typo's million files took minutes to stop
    p.add_argument("--runs", type=runs, default=60, help=f"4 to {demo.MAX_RUNS}")
    p.add_argument("--step", type=float, default=0.05, help="relative step (0.05: +5%%; 0: none)")
    at = "first run of the step (from 0; default: two thirds of --runs, 40 of 60)"
    p.add_argument("--step-at", type=int, help=at)
    p.add_argument("--method", default="ours", choices=demo.METHODS, help="the method it slows")
    p.add_argument("--seed", type=int, default=0)
    for name, p in sub.choices.items():
        if name != "demo":  # it writes results files, no database
            db_option(p)


def _cmd_add(db: str | None, paths: Iterable[str | Path], folder: bool = False) -> int:
    """Store each file, one line each (``import``: JSON that is not results skipped, then the
    counts); the database is made at the first file worth storing, never for bad input."""
    counts = {"added": 0, "already stored": 0, "skipped": 0, "refused": 0}
    with ExitStack() as stack:
        conn = None
        for path in paths:
            if folder and not ingest.looks_like_results(Path(path)):
                print(f"{path}: skipped (not a results file)")
                counts["skipped"] += 1
                continue
            try:
                document = read_json(path)
                if conn is None:
                    ingest.prepare(document, str(path))  # every row checked before a database
                    conn = stack.enter_context(closing(store.connect(db, create=True)))
                added = ingest.add_document(conn, document, str(path))
            except ResultsError as err:  # the others are still stored
                print_error(str(err).splitlines()[0])
                counts["refused"] += 1
                continue
            what = "already stored" if added.duplicate else "added"
            counts[what] += 1
            print(f"{path}: {what} (run {added.content_hash[:12]}, {added.n_cells} cells)")
    if folder:
        print(", ".join(f"{v} {k}" for k, v in counts.items()))
    return 2 if counts["refused"] else 0


def _cmd_list(conn: sqlite3.Connection, args: argparse.Namespace) -> int:
    """One line per run when that fits the terminal; else two (``print_listing``)."""
    runs, sizes = store.list_runs(conn), store.tp_sizes(conn)
    rows = []
    for r in runs:
        tp = f" (TP={','.join(map(str, sizes[r.id]))})" if r.id in sizes else ""
        commit = r.sha[:10] + ("+dirty" if r.dirty else "")
        rows.append([r.short, r.created, commit, f"{r.n_cells} cells{tp}", r.env_hash])
        rows[-1] += [r.device_name, relative(r.source)]
    headers = ("run", "created", "commit", "cells", "env", "device", "source")
    print_listing(headers, rows, ("{0}  {1}  {2}  {3}", "env {4}  {5}  {6}"))
    print(f"{len(runs)} runs")
    return 0


def _describe(change: rules.Change, head: str, tail: str = "") -> str:
    """A change as a block that fits the terminal: ``head`` and CELL/RUN, then the rest folded."""
    before, after = change.before_point, change.after_point
    unit, scale = ("ms", 1.0) if change.series.metric == "time" else ("MiB", 1 / 2**20)
    width = max(40, shutil.get_terminal_size().columns)
    lines = [
        f"{change.series.metric} {change.size:+.1%} ({change.before * scale:.4g} -> "
        f"{change.after * scale:.4g} {unit}, noise {change.noise_bound:.1%}, "
        f"{change.persistence} runs after)",
        change.series.label,
        f"commit {before.sha[:10]} ({before.created}) -> {after.sha[:10]} ({after.created})"
        + ("  [environment changed]" if before.env_hash != after.env_hash else ""),
        tail,
    ]
    fill = textwrap.TextWrapper(width, initial_indent="    ", subsequent_indent="      ").fill
    return "\n".join([f"{head} {change.ident}", *map(fill, filter(None, lines))])


def _cmd_check(conn: sqlite3.Connection, args: argparse.Namespace) -> int:
    busy = {} if args.accept_busy else rules.busy_runs(conn)
    for run_hash, why in busy.items():
        note = f"busy run {run_hash[:12]}: its times are left out ({why}; --accept-busy)"
        print(textwrap.fill(note, max(40, shutil.get_terminal_size().columns)))
    series = rules.load_series(conn, args.metric or store.METRICS, args.device, set(busy))
    acked = store.acks(conn)
    judged = [(c, rules.verdict(c, acked)) for s in series for c in rules.judge(s)]
    failing = [c for c, state in judged if state == "open"]
    settled = [c for c, state in judged if state in ("acknowledged", "recovered")]
    for change in failing:
        print(_describe(change, "REGRESSION"))
    for change in settled:
        why = rules.ack_reason(change, acked)
        print(_describe(change, "settled", f"acknowledged: {why}" if why else "recovered later"))
    for change in (c for c, state in judged if state == "change" and args.verbose):
        print(_describe(change, "change", "not a regression: " + "; ".join(change.why_not)))
    print(
        f"{len(series)} series checked: {len(failing)} open regressions, "
        f"{len(settled)} recovered or acknowledged"
    )
    return 1 if failing else 0


def _cmd_ack(conn: sqlite3.Connection, args: argparse.Namespace) -> int:
    cell, sep, run_prefix = args.regression.partition("/")
    if not sep or not cell or not run_prefix:
        raise ValueError(f"{args.regression!r}: expected CELL/RUN as `history check` prints it")
    if not store.exists(conn, "cells", "cell_id", cell):
        raise ValueError(f"{cell}: no such cell in the history")
    run = store.find_run(conn, run_prefix)
    if run is None:
        raise ValueError(f"{run_prefix}: no run (or more than one) has a hash starting so")
    if not args.reason.strip():
        raise ValueError("--reason must say why the regression is accepted")
    store.add_ack(conn, cell, run.content_hash, args.metric or "*", args.reason.strip())
    print(f"acknowledged {cell}/{run.short} ({args.metric or 'time and memory'}): {args.reason}")
    return 0


def _sample_sets(conn: sqlite3.Connection, per_kind: int) -> dict[str, list[list[float]]]:
    """Per device kind, up to ``per_kind`` cells' samples, spread from quiet to noisy."""
    by_kind: dict[str, dict[str, list[float]]] = {}
    for row in store.cell_rows(conn):
        samples = json.loads(row["samples_json"])
        if row["status"] == "ok" and not row["interpreted"] and len(samples) >= 10:
            by_kind.setdefault(row["device_kind"], {})[row["cell_id"]] = samples  # latest wins
    out = {}
    for kind, cells in sorted(by_kind.items()):
        ordered = sorted(cells.values(), key=lambda s: float(np.std(s) / np.median(s)))
        picks = np.unique(np.linspace(0, len(ordered) - 1, min(per_kind, len(ordered))).round())
        out[kind] = [ordered[int(i)] for i in picks]
    return out


def _cmd_sensitivity(conn: sqlite3.Connection, args: argparse.Namespace) -> int:
    sets = _sample_sets(conn, args.cells)
    if not sets:
        raise ValueError("no stored cell has 10 samples or more: `history import` results first")
    rates = []
    series = rules.load_series(conn, ["time"]) if args.run_noise is None else []
    for kind, samples in sets.items():
        # --run-noise, else the median run-to-run scatter of the kind's series of 4 runs or more
        sigmas = [rules.scatter(s) for s in series if s.device_kind == kind and len(s.points) >= 4]
        noise = args.run_noise if args.run_noise is not None else float(np.median(sigmas or [0]))
        print(f"{kind}: {len(samples)} cells' samples, run-to-run noise {noise:.2%}")
        runs = dict(trials=args.trials, n_runs=args.runs, change_at=args.runs * 3 // 5)
        rates += sensitivity.measure(samples, kind, **runs, run_noise=noise, seed=args.seed)
    print(sensitivity.format_table(rates))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.step_at is None:  # follows --runs: a fixed 40 refused `--runs 5`, unasked
        args.step_at = args.runs * 2 // 3
    elif not 0 < args.step_at < args.runs:
        last = args.runs - 1
        raise ValueError(f"--step-at {args.step_at}: must be between 1 and --runs - 1 ({last})")
    if not -1 < args.step < 10:
        raise ValueError(f"--step {args.step:g}: must be a relative change in (-1, 10)")
    check_output_dir(args.out, "-o")
    try:
        paths = demo.write(args.out, args.runs, args.step, args.step_at, args.method, args.seed)
    except OSError as err:
        raise ValueError(f"{args.out}: cannot write there ({err.strerror or err})") from None
    step = f"{args.step:+.0%} on {args.method} from run {args.step_at}" if args.step else "no step"
    print(f"{len(paths)} synthetic runs ({step}) in {args.out}: `history import {args.out}`")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the parsed subcommand; returns the exit code (bad input raises ``ValueError``)."""
    command = args.history_command
    if command == "demo":
        return _cmd_demo(args)
    try:
        if command == "add":
            return _cmd_add(args.db, args.results)
        if command == "import":
            if not Path(args.folder).is_dir():
                raise ValueError(f"{args.folder}: not a folder")
            return _cmd_add(args.db, ingest.results_files(args.folder), folder=True)
        write = command == "ack"  # the others read a database that exists, never making one
        with closing(store.connect(args.db, create=False, write=write)) as conn:
            commands = {"list": _cmd_list, "check": _cmd_check, "ack": _cmd_ack}
            return commands.get(command, _cmd_sensitivity)(conn, args)
    except sqlite3.DatabaseError as err:
        where = args.db or store.default_db_path()
        raise ValueError(f"{where}: {str(err).splitlines()[0]}") from None
