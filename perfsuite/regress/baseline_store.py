"""Stored baselines: ``reports/baselines/<device-slug>/<shape>.json`` (``-tpK`` for cells
across K ranks), results documents with raw samples for ``compare``. Only ``perfsuite
baseline update RESULTS`` writes there, replacing the files of the shapes RESULTS measured."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich import box

from perfsuite.fit import Column, TrimmedConsole, fit_table, fold
from perfsuite.measure.machine import document_busy
from perfsuite.regress.verdicts import env_differences
from perfsuite.results.kinds import require_kind
from perfsuite.results.outpath import check_output_dir
from perfsuite.results.provenance import device_slug
from perfsuite.results.results import ResultsError, load_results, new_document, write_results

DEFAULT_ROOT = Path("reports") / "baselines"
# What a store holds: loss cells, and the same across ranks (``-tpK`` files).
STORED_KINDS = frozenset({"loss", "tp"})


def shape_stem(row: dict[str, Any]) -> str:
    """A row's file name (no .json): its preset, or its dimensions with overrides (``smoke*``
    -> ``smoke-n64-v512-d32``); ``-tpK`` across K ranks (never the one-device file)."""
    name = str(row.get("shape") or "custom")
    if name.endswith("*") or name == "custom":
        name = f"{name.rstrip('*')}-n{row['tokens']}-v{row['vocab']}-d{row['hidden']}"
    if row.get("tp") is not None:
        name += f"-tp{row['tp']}"
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in name)
    return safe.strip(".-") or "custom"


def stored_baseline(
    root: Path, current: dict[str, Any]
) -> tuple[dict[str, Any], list[Path], list[str]]:
    """(document, files used, shapes without a file) of ``current``'s device and shapes;
    ``ResultsError`` if none is stored, or if the files' environments disagree."""
    folder = Path(root) / device_slug(current["env"])
    stems = list(dict.fromkeys(shape_stem(r) for r in current["rows"]))
    if not folder.is_dir():
        have = sorted(p.name for p in Path(root).iterdir() if p.is_dir()) if root.is_dir() else []
        where = "" if Path(root) == DEFAULT_ROOT else f" --root {root}"
        raise ResultsError(
            f"no baseline is stored for device "
            f"{current['env'].get('device', {}).get('name')!r} (expected {folder}/; stored "
            f"devices: {', '.join(have) or 'none'}). Make one from a run on this device: "
            f"`perfsuite baseline update RESULTS{where}`."
        )
    paths = [folder / f"{stem}.json" for stem in stems if (folder / f"{stem}.json").exists()]
    missing = [stem for stem in stems if not (folder / f"{stem}.json").exists()]
    if not paths:
        raise ResultsError(
            f"{folder}/ holds no baseline for shape(s) {', '.join(stems)}. "
            "Create it with `perfsuite baseline update RESULTS`."
        )
    docs = [load_results(p) for p in paths]
    for path, doc in zip(paths[1:], docs[1:], strict=True):
        problems, _ = env_differences(docs[0]["env"], doc["env"])
        if problems:
            raise ResultsError(
                f"stored baselines {paths[0]} and {path} disagree on the environment "
                f"({'; '.join(problems)}): update them from one run"
            )
    rows = [row for doc in docs for row in doc["rows"]]
    return new_document(docs[0]["env"], rows), paths, missing


def update(
    results: Path, root: Path = DEFAULT_ROOT, *, dry_run: bool = False, force: bool = False
) -> list[str]:
    """Store ``results``, returning what was done line by line; a shape with fewer ``ok``
    cells than stored is refused unless ``force`` (errors must not replace a good one)."""
    document = load_results(results)  # validated, rows and all: a bad file is never stored
    # Only cells `compare` judges against a store (a step file's passed for a loss baseline).
    require_kind(document, results, STORED_KINDS, "baseline update")
    _check_root(root)
    folder = Path(root) / device_slug(document["env"])
    if not dry_run:  # made and written to now: a bad --root costs nothing and stores nothing
        check_output_dir(root, "--root")
        check_output_dir(folder, "--root")
    lines = []
    if (document["env"].get("git") or {}).get("dirty"):
        lines.append(f"warning: {results} was measured from a checkout with uncommitted changes")
    busy = document_busy(document)
    if busy:  # stored without a word, it made every later compare refuse to judge time
        lines.append(
            f"warning: {results} was measured on a busy machine ({busy}): `compare` judges "
            "time against it only with --accept-busy; update from a quiet run instead"
        )
    planned, shapes = [], {}  # a file per shape, with the run's env
    for row in document["rows"]:
        shapes.setdefault(shape_stem(row), []).append(row)
    for stem, rows in shapes.items():
        path, doc = folder / f"{stem}.json", new_document(document["env"], rows)
        ok = sum(r["status"] == "ok" for r in doc["rows"])
        what = f"{len(doc['rows'])} cells ({ok} ok)"
        if path.exists():
            try:
                old = load_results(path)
            except ResultsError:
                what += ", replacing an unreadable file"
            else:
                old_ok = sum(r["status"] == "ok" for r in old["rows"])
                if ok < old_ok and not force:
                    raise ResultsError(
                        f"{path}: the stored baseline has {old_ok} ok cells, {results} only "
                        f"{ok}; refusing to replace it (--force to do it anyway)"
                    )
                what += f", replacing {len(old['rows'])} cells from {old['env'].get('created')}"
        planned.append((path, doc, what))
    # Written only once every shape passed the check: all or nothing.
    for path, doc, what in planned:
        if not dry_run:
            try:
                write_results(path, doc)
            except OSError as err:
                raise ResultsError(f"--root {root}: cannot write {path} ({err.strerror})") from None
        lines.append(f"{'would write' if dry_run else 'wrote'} {path}: {what}")
    return lines


def _check_root(root: Path) -> None:
    """A ``--root`` that is a file (a results file given in its place) is an error."""
    if Path(root).exists() and not Path(root).is_dir():
        raise ResultsError(f"--root {root}: is a file, not a folder of stored baselines")


def list_stored(root: Path = DEFAULT_ROOT) -> tuple[list[list[str]], list[str]]:
    """(a row per stored file: file, cells, created, git, torch; lines for the rest)."""
    _check_root(root)
    rows, lines = [], []
    for path in sorted(Path(root).glob("*/*.json")):
        try:
            doc = load_results(path)
        except ResultsError as err:
            lines.append(f"{path}: unreadable: {err}")
            continue
        env = doc["env"]
        sha = str((env.get("git") or {}).get("sha") or "?")[:10]
        torch = str((env.get("versions") or {}).get("torch"))
        rows.append([str(path), f"{len(doc['rows'])} cells", env.get("created", "?"), sha, torch])
    return rows, lines if rows or lines else [f"no stored baselines under {root}/"]


def print_listing(headers: Sequence[str], rows: list[list[str]], lines: tuple[str, str]) -> None:
    """A table when each item fits on one line; else two lines an item (``lines`` formatted
    with its row), folded at spaces and slashes, the second indented."""
    console = TrimmedConsole(highlight=False)
    columns = [Column(h, fold=False) for h in headers]  # a row that folds reads badly
    options: dict[str, Any] = dict(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table = fit_table(columns, rows, console.width, **options) if rows else None
    if table is not None:
        console.print(table)
    for row in rows if table is None else []:
        for indent, line in zip(("", "  "), lines, strict=True):  # a long piece stays whole
            folded = fold(line.format(*row), console.width - 4, path=True)
            console.print(indent + folded.replace("\n", "\n    "), soft_wrap=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``perfsuite baseline {update,list}``."""
    sub = parser.add_subparsers(dest="baseline_command", required=True)
    up = sub.add_parser(
        "update",
        help="store RESULTS as the baseline of its device (one file per shape)",
        description=(__doc__ or "").replace("``", ""),  # help is plain text, not RST
    )
    up.add_argument("results", type=Path, help="results file from `perfsuite run`")
    up.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="default: %(default)s")
    up.add_argument("--dry-run", action="store_true", help="say what would be written")
    up.add_argument("--force", action="store_true", help="replace a baseline with more ok cells")
    ls = sub.add_parser("list", help="list the stored baselines")
    ls.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="default: %(default)s")


def run(args: argparse.Namespace) -> int:
    if args.baseline_command == "update":
        lines = update(args.results, args.root, dry_run=args.dry_run, force=args.force)
    else:
        rows, lines = list_stored(args.root)
        headers = ("file", "cells", "created", "git", "torch")
        print_listing(headers, rows, ("{0}", "{1}, {2}, git {3}, torch {4}"))
    for line in lines:
        print(line)
    return 0
