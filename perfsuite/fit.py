"""One rule for every console table: fit the terminal, fold text at word or hyphen
boundaries, never cut a number.

rich folds an over-long cell at the column's edge (``ours-fused-no-filt`` / ``er``,
``F.linear_cross_`` / ``entropy``) or cuts it with an ellipsis (``24.18 → 3…``). Here
each column is either *text*, which may fold only after a space, a hyphen or a plus
between letters (``ours-fused-`` / ``no-filter``, ``fwd+`` / ``bwd``, ``24.18 →`` /
``31.22``), or *fixed*, which never folds. The widest text column gives up one
character at a time until the table fits; a table that cannot fit returns None,
and the caller lays its rows out another way. ``fold(..., path=True)`` also folds
after a slash (``reports/`` / ``runs.json``).

``TrimmedConsole``: a console whose lines, written to a file or a pipe, end without
the spaces rich pads tables and titles with to the full width.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType, RenderHook
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

# Break opportunities: after whitespace, or after "-" / "+" between two letters.
_PIECE = re.compile(r"\S+?(?:(?<=[A-Za-z][-+])(?=[A-Za-z])|(?=\s)|$)\s*")
# ... and, in a path, after a slash.
_PATH_PIECE = re.compile(r"\S+?(?:(?<=[A-Za-z][-+])(?=[A-Za-z])|(?<=/)(?=[^/\s])|(?=\s)|$)\s*")


@dataclass(frozen=True)
class Column:
    header: str
    justify: str = "left"  # "left" | "right"
    fold: bool = True  # text: folds at boundaries; False: never folds (numbers)


def pieces(text: str, path: bool = False) -> list[str]:
    """``text`` cut at its break opportunities (each piece keeps its trailing space)."""
    return (_PATH_PIECE if path else _PIECE).findall(text) or [text]


def shortest(text: str) -> int:
    """The narrowest width ``text`` folds to: its longest unbreakable piece."""
    return max((len(p.rstrip()) for line in text.split("\n") for p in pieces(line)), default=0)


def fold(text: str, width: int, path: bool = False) -> str:
    """``text`` folded to lines of at most ``width`` at break opportunities only (a
    piece longer than ``width`` stays whole on its own line)."""
    out = []
    for line in text.split("\n"):
        current = ""
        for piece in pieces(line, path):
            if current and len((current + piece).rstrip()) > width:
                out.append(current.rstrip())
                current = ""
            current += piece
        out.append(current.rstrip())
    return "\n".join(out)


def _styled(cell: str | Text, width: int | None) -> Text:
    text = cell if isinstance(cell, Text) else Text.from_markup(cell)
    if width is None:
        return text
    style = text.spans[0].style if text.spans else text.style
    return Text(fold(text.plain, width), style=style)


def _width(cell: str | Text) -> tuple[int, int]:
    plain = cell.plain if isinstance(cell, Text) else Text.from_markup(cell).plain
    return max(map(len, plain.split("\n"))), shortest(plain)


def fits(table: Table, width: int) -> bool:
    """Whether ``table`` prints at ``width`` without rich cutting a cell (…) or running
    past the edge."""
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(table, crop=False)
    text = console.file.getvalue()
    return "…" not in text and max(map(len, text.splitlines()), default=0) <= width


def fit_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str | Text]],
    width: int,
    sections: Sequence[int] = (),
    **table_options: Any,
) -> Table | None:
    """A table of ``rows`` no wider than ``width`` (None when even fully folded it is
    wider); a line under each row in ``sections``; ``table_options`` go to rich's
    ``Table``."""
    limits: list[int] = []
    floors: list[int] = []
    for i, col in enumerate(columns):
        natural, floor = _width(col.header)
        cells = max((_width(row[i])[0] for row in rows), default=0)
        for row in rows:
            n, f = _width(row[i])
            natural, floor = max(natural, n), max(floor, f)
        # a number column never folds its cells; its header folds to the cells' width
        words = max((len(w) for w in col.header.split()), default=0)  # "fwd+bwd" stays whole
        limits.append(natural if col.fold else -max(cells, words))
        floors.append(floor)
    # Folded as far as it goes and still too wide: one space between columns.
    tight = {**table_options, "padding": (0, 0), "collapse_padding": False}
    for options in (table_options, tight):
        # Folded as far as it goes: if that is too wide, no step on the way fits (a
        # table of many rows took seconds to find out, one narrowing at a time).
        folded = [max(f, 1) if lim > 0 else lim for lim, f in zip(limits, floors, strict=True)]
        if not fits(_build(columns, rows, folded, sections, options), width):
            continue
        trial = list(limits)
        while True:
            table = _build(columns, rows, trial, sections, options)
            if fits(table, width):
                return table
            shrinkable = [i for i, lim in enumerate(trial) if lim > max(floors[i], 1)]
            if not shrinkable:
                break
            widest = max(shrinkable, key=lambda i: trial[i])
            trial[widest] -= 1
    return None


def _build(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str | Text]],
    limits: list[int],
    sections: Sequence[int],
    options: dict[str, Any],
) -> Table:
    """``limits``: a text column's fold width; minus a number column's header width."""
    table = Table(**options)
    for col, limit in zip(columns, limits, strict=True):
        header = _styled(col.header, abs(limit))
        table.add_column(header, justify=col.justify, no_wrap=True, overflow="ellipsis")
    for i, row in enumerate(rows):
        cells = (_styled(c, lim if lim > 0 else None) for c, lim in zip(row, limits, strict=True))
        table.add_row(*cells, end_section=i in sections)
    return table


def print_fitted(
    console: Console,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str | Text]],
    title: str = "",
    **table_options: Any,
) -> None:
    """The table when it fits ``console``; else each row as a block of ``header: value``
    lines (folded at break opportunities, indented), so nothing is cut at any width."""
    table = fit_table(columns, rows, console.width, title=title or None, **table_options)
    if table is not None:
        console.print(table)
        return
    if title:
        console.print(title, style="bold", highlight=False)
    for row in rows:
        first, *rest = row
        console.print(first, style="bold", highlight=False)
        for column, cell in zip(columns[1:], rest, strict=True):
            head = f"  {' '.join(column.header.split())}: "
            console.print(_hanging(head, cell, console.width), soft_wrap=True)


def _hanging(head: str, cell: str | Text, width: int) -> Text:
    """``head`` then ``cell`` folded at its break opportunities, further lines indented
    under the label (rich's own wrap began them at column 0, after a dangling space)."""
    text = cell if isinstance(cell, Text) else Text.from_markup(cell)
    style = text.spans[0].style if text.spans else text.style
    indent = " " * (len(head) - len(head.lstrip()) + 2)
    lines, current = [], head
    for piece in (p for line in text.plain.split("\n") for p in pieces(line)):
        if current.strip() and len((current + piece).rstrip()) > width:
            lines.append(current.rstrip())
            current = indent
        current += piece
    lines.append(current.rstrip())
    out = Text(lines[0][: len(head)])
    out.append("\n".join([lines[0][len(head) :], *lines[1:]]), style=style)
    return out


class _Trimmed:
    """``renderable`` with the trailing spaces of its lines dropped (files and pipes)."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        segments = console.render(self.renderable, options)
        if console.is_terminal:  # a live display redraws its lines: leave them as they are
            yield from segments
            return
        line: list[Segment] = []
        for segment in segments:
            if segment.control:
                yield from line
                line = []
                yield segment
                continue
            first, *more = segment.text.split("\n")
            line.append(Segment(first, segment.style))
            for part in more:
                yield from _rstrip(line)
                yield Segment.line()
                line = [Segment(part, segment.style)]
        yield from line


def _rstrip(line: list[Segment]) -> list[Segment]:
    while line and not line[-1].text.rstrip(" "):
        line = line[:-1]
    if line:
        last = line[-1]
        line = [*line[:-1], Segment(last.text.rstrip(" "), last.style)]
    return line


class _TrimHook(RenderHook):
    def process_renderables(self, renderables: list[Any]) -> list[Any]:
        return [_Trimmed(r) for r in renderables]


class TrimmedConsole(Console):
    """rich's console, but a line written to a file ends at its last character: rich pads
    tables, titles and log lines to the full width (80 columns of spaces in a pipe)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.push_render_hook(_TrimHook())
