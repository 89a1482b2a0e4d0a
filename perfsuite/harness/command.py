"""The driver of every measuring command: its results file checked and held before
anything is measured, rewritten after every finished case (``Checkpoint``: the one
writer), the progress bar and lines, and Ctrl-C in one wording: nothing measured lost."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.harness.progress import NoticeFn, ProgressFn, finished_lines
from perfsuite.parser import print_error
from perfsuite.results.lock import claim
from perfsuite.results.outpath import check_output_file
from perfsuite.results.results import (
    new_document,
    nothing_measured,
    read_json,
    status_counts,
    write_results,
)

if TYPE_CHECKING:
    from rich.console import Console

Rows = list[dict[str, Any]]


class Checkpoint(AbstractContextManager["Checkpoint"]):
    """A results file a command writes as it goes: ``path`` (and ``outputs`` beside it)
    checked, then held by this process alone (``lock.claim``: a second command on it is
    refused) until its ``with`` ends; ``start`` runs once it is held. ``add`` rewrites it
    after every finished case: a partial document of ``env`` and every row so far (``rows``
    may start with a resumed run's), as ``shape`` lays them out."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        outputs: Iterable[Path] = (),
        start: Callable[[], object] | None = None,
    ) -> None:
        def check() -> Path:
            checked = check_output_file(path, overwrite=overwrite)  # makes its folder
            for other in outputs:
                check_output_file(other, "--out", overwrite=overwrite)
            return checked

        self.path = check()
        self.env: dict[str, Any] = {}
        self.rows: Rows = []
        self.shape: Callable[[Rows], Rows] = list
        self.wrote = self.final = False
        self.lock = threading.Lock()
        # Checked again once held: a command that wrote it in between is not overwritten.
        self.writer = claim(self.path, lambda: (check(), start and start()))

    def add(self, rows: Rows) -> None:
        """A finished case's rows: the file rewritten with them."""
        with self.lock:
            self.rows.extend(rows)
            self.save()

    def save(self, document: dict[str, Any] | None = None) -> None:
        """The file rewritten: ``document`` (the finished one) or, marked partial, every
        row so far."""
        self.final = document is not None
        if document is None:
            document = new_document({**self.env, "partial": True}, self.shape(self.rows))
        self.wrote = True
        write_results(self.path, document)

    def kept(self) -> int:
        """The rows the file holds (an interrupt may land between a write and anything
        after it); 0 until this command wrote it."""
        return len(read_json(self.path)["rows"]) if self.wrote and self.path.exists() else 0

    def __exit__(self, *exc: object) -> None:
        self.writer.release()


def command(
    checkpoint: Checkpoint,
    measure: Callable[[ProgressFn, NoticeFn], dict[str, Any]],
    console: Console,
    units: list[tuple[str, dict[str, Any]]],
    *,
    label: Callable[[str, dict[str, Any]], str] | None = None,
    cost: Callable[[str, dict[str, Any]], float] | None = None,
) -> dict[str, Any]:
    """``measure(progress, notice)`` with the file held and a progress bar over the
    (method, case) ``units`` to go: ``progress`` after every finished case (its line from
    ``label``; the bar advanced by its ``cost``, else by one), ``notice`` for any other
    line. The finished document is written before the file is let go; on Ctrl-C or
    SIGTERM the rows told so far are, and the console says how many."""
    from rich import progress as bars

    columns = [
        bars.TextColumn("[progress.description]{task.description}"),
        bars.BarColumn(),
        bars.TextColumn("{task.fields[cells]}"),
        bars.TimeElapsedColumn(),
    ]
    if cost is not None:  # a time model: the time left is worth showing
        columns += [bars.TextColumn("eta"), bars.TimeRemainingColumn()]
    weight = cost or (lambda method, case: 1.0)
    total = sum(weight(method, case) for method, case in units) or 1.0
    done = 0
    with checkpoint:
        try:
            # Not a terminal (a log, a CI job): the lines only, no bar's characters.
            with bars.Progress(
                *columns, console=console, transient=True, disable=not console.is_terminal
            ) as bar:
                task = bar.add_task("", total=total, cells=f"0/{len(units)} cells")

                def progress(method: str, case: dict[str, Any], rows: Rows) -> None:
                    nonlocal done
                    done += 1
                    for line in finished_lines(label(method, case), rows) if label else ():
                        bar.console.log(line, highlight=False)
                    said = f"{done}/{len(units)} cells"
                    bar.update(task, advance=weight(method, case), description=method, cells=said)

                document = measure(progress, lambda line: bar.console.log(line, highlight=False))
                checkpoint.save(document)  # the whole document, while the file is held
        except KeyboardInterrupt:  # said after the bar is gone, or it is erased with it
            if checkpoint.rows and not checkpoint.final:
                checkpoint.save()  # a case told as the signal came: in the file too
            if kept := checkpoint.kept():
                said = f": {kept} finished cell row(s) kept in {checkpoint.path} (a partial "
                said += "results file)"
            else:
                said = " before any cell finished: nothing written"
            console.print(f"[red]interrupted[/red]{said}", soft_wrap=True)  # a path whole
            raise
    return document


def ended(document: dict[str, Any], out: Path, console: Console, what: str = "cell") -> int:
    """The command's last lines: where its results are; exit 1, saying so, when no
    ``what`` was measured."""
    rows = document["rows"]
    console.print(f"results: {out} ({status_counts(rows) or 'no'} rows)", soft_wrap=True)
    if nothing_measured(rows):
        print_error(f"no {what} was measured ({status_counts(rows)})")
        return 1
    return 0
