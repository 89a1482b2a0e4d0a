"""``perfsuite kernel-report``: every shipped kernel config built ahead of time as a launch
specialises it and read (registers, spills, memory, CTAs per SM, SASS counts, tensor-core
work in a spin lock), static costs and a modelled cost per backward design; exit 1 on a
failing build or a regression against ``--baseline`` (docs/kernel.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from perfsuite.harness.progress import Countdown, NoticeFn
from perfsuite.results.outpath import check_output_dir

from . import diff, options
from .options import Shape, cfg_arch, parse_shape
from .options import add_arguments as add_arguments  # perfsuite.cli's hook

# Submodules that import torch or Triton are imported where used, after the options' checks.
if TYPE_CHECKING:
    from .launches import Launch

# What a stored baseline records of the selection (baseline.load checks it covers a run).
_STORED_SELECTION = ("archs", "dtypes", "dtypes_asked", "kernels", "peers", "kernels_asked", "cce")


def collect(
    shape: Shape, archs: list[str], dtypes: list[str], kernels: list[str], *, with_cce: bool
) -> tuple[list[Launch], str | None]:
    """Every shipped config × variant of ``kernels`` to build, and why CCE's are missing
    (None when they are there)."""
    from . import cce, launches

    note = cce.available() if with_cce else "not asked for"
    tables = launches.TABLES + (((cce.launches,),) if note is None else ())
    todo = [
        la
        for family in tables
        for arch in archs
        for dtype in dtypes
        for table in family
        for la in table(shape, dtype, arch)
        if la.kernel in kernels
    ]
    return todo, note


_POOL_LAUNCHES: list[Launch] = []  # what forked builders build, by index


def _row_at(index: int) -> tuple[int, dict[str, Any]]:
    from . import build, launches

    launch = _POOL_LAUNCHES[index]
    row = {k: getattr(launch, k) for k in ("kernel", "variant", "config", "dtype", "arch", "ours")}
    row |= {"declared_ctas_per_sm": launch.declared_ctas, "ok": False, "error": None}
    try:
        row.update(build.build(launch), ok=True)
        row.update(launches.persistent_grid(launch, row["ctas_per_sm"]))
    except Exception as exc:  # reported per row (and failing the report), never swallowed
        row["error"] = f"{type(exc).__name__}: {str(exc).strip()[:1500]}"
    return index, row


def build_rows(todo: list[Launch], jobs: int, notice: NoticeFn) -> list[dict[str, Any]]:
    """Build every launch, ``jobs`` at a time (forked workers; 1: in this process);
    ``notice`` hears a line per build done (a full report takes minutes)."""
    jobs = max(1, min(jobs, len(todo)))
    countdown = Countdown(len(todo), notice)
    notice(f"building {len(todo)} kernel launch(es), {jobs} at a time")
    rows: list[dict[str, Any]] = [{} for _ in todo]
    _POOL_LAUNCHES[:] = todo
    try:
        with contextlib.ExitStack() as stack:
            done = map(_row_at, range(len(todo)))
            if jobs > 1:
                with contextlib.suppress(ImportError):  # Triton's hash of its own library
                    from triton.runtime.cache import triton_key  # (~0.5 s): once, not a worker

                    triton_key()
                # Forked workers inherit the CLI's SIGTERM handler (a traceback when the
                # pool ends them): the default's back.
                default = (signal.SIGTERM, signal.SIG_DFL)
                pool = multiprocessing.get_context("fork").Pool(jobs, signal.signal, default)
                done = stack.enter_context(pool).imap_unordered(_row_at, range(len(todo)))
            for index, row in done:
                countdown.done(f"built {diff.where(row)}" + ("" if row["ok"] else ": failed"))
                rows[index] = row
    finally:
        _POOL_LAUNCHES.clear()
    return rows


def kernel_report(sel: dict[str, Any], shape: Shape, jobs: int, notice: NoticeFn) -> dict[str, Any]:
    """The report of selection ``sel`` (``options.selection``) at ``shape``: a row per
    build, the cost tables, notes, the ``--launched`` fractions; ``notice``: progress."""
    import triton.language as tl

    from . import baseline, costs, launched

    archs = sel["arch_order"]
    # Interpreted, the kernels are interpreter wrappers fixed at import: a child builds.
    interpreted = type(tl.cdiv).__name__ == "InterpretedFunction"
    if os.environ.get("TRITON_INTERPRET") == "1" or interpreted:
        report = _report_in_child(sel, shape, jobs)
    else:
        kernels = sel["kernels"] + sel["peers"]
        todo, cce_note = collect(shape, archs, sel["dtypes"], kernels, with_cce=sel["cce"])
        rows = build_rows(todo, jobs, notice)
        measured = {
            (r["kernel"], cfg_arch(r["arch"]), r["dtype"]): r["ctas_per_sm"]
            for r in rows
            if r["ok"] and r["variant"] in ("plain", "train")
        }
        notes = [] if cce_note is None else [f"CCE side by side skipped: {cce_note}"]
        report = {"shape": vars(shape), "rows": rows}
        report["costs"] = costs.cost_rows(shape, measured, cce_note is None)
        report["designs"] = costs.design_rows(shape, cce_note is None)
        report["notes"] = notes + costs.rate_notes()
    report["launched"] = launched.rows(shape, sel, report["costs"], notice)
    report["toolchain"] = baseline.toolchain(archs)
    report["selection"] = {k: sel[k] for k in _STORED_SELECTION}
    return report


def _report_in_child(sel: dict[str, Any], shape: Shape, jobs: int) -> dict[str, Any]:
    """The report of a child without ``TRITON_INTERPRET``; its stderr (progress, errors) is ours."""
    from . import baseline

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-m", "perfsuite", "kernel-report", "--json", "--jobs", str(jobs)]
    cmd += baseline.command_args(sel, vars(shape), sel["arch_order"])
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env, check=False)
    try:
        report = json.loads(out.stdout)
    except json.JSONDecodeError:
        failed = f"kernel report child failed (exit {out.returncode}): its error is above"
        raise RuntimeError(failed) from None
    report["shape"] = vars(shape)
    return report


def failures(rows: list[dict[str, Any]]) -> list[str]:
    """Why the report fails: a row that did not build; one of ours that spills, holds a
    lock across a tensor-core instruction or fits fewer CTAs per SM than declared."""
    out = []
    for r in rows:
        where = diff.where(r)
        if not r["ok"]:
            out.append(f"{where}: {r['error']}")
            continue
        if not r.get("ours", True):
            continue
        stores, loads = r["spill_store_bytes"], r["spill_load_bytes"]
        if stores or loads:
            out.append(f"{where}: spills {stores}B st / {loads}B ld")
        if r["critical_tensor_ops"]:
            out.append(f"{where}: {r['critical_tensor_ops']} tensor-core ops inside a spin lock")
        ctas, declared = r["ctas_per_sm"], r.get("declared_ctas_per_sm")
        if ctas == 0 or (declared and ctas < declared):
            out.append(f"{where}: fits {ctas} CTAs per SM, config declares {declared or 1}")
    return out


def run(args: argparse.Namespace) -> int:
    try:
        shape = parse_shape(args.shape)
        sel = options.selection(args)
        if args.save:
            check_output_dir(args.save, "--save")
        from . import baseline, render  # Triton, torch: once the options are known good

        stored = None
        if args.baseline:
            stored = baseline.load(args.baseline, sel, vars(shape), across=args.across_triton)
    except ValueError as exc:  # OutputPathError and BaselineError too: one line, exit 2
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Progress lines on stderr: stdout is --json's.
    report = kernel_report(sel, shape, args.jobs, lambda s: print(s, file=sys.stderr, flush=True))
    problems = failures(report["rows"])
    comparison = None
    if stored is not None:
        doc, path = stored
        old, across = baseline.in_selection(doc["rows"], sel), args.across_triton
        comparison = diff.compare(old, report["rows"], threshold=sel["threshold"], across=across)
    if args.json:
        extra = {"comparison": comparison.as_dict()} if comparison else {}
        print(json.dumps({**report, **extra}, indent=2))
    elif comparison is not None:
        render.render_diff(comparison, doc, path, report, problems)
    else:
        render.render(report, problems)
    if args.save:
        saved = baseline.save(report, args.save)
        print(f"saved {saved}", file=sys.stderr if args.json else sys.stdout)
    return 1 if problems or (comparison and comparison.failing()) else 0
