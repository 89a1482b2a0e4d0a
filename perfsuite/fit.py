"""One rule for every console table: fit the terminal, fold text at word or hyphen
boundaries, never cut a number.

rich folds an over-long cell at the column's edge (``ours-fused-no-filt`` / ``er``,
``F.linear_cross_`` / ``entropy``) or cuts it with an ellipsis (``24.18 → 3…``). Here
each column is either *text*, which may fold only after a space, a hyphen or a plus
between letters (``ours-fused-`` / ``no-filter``, ``fwd+`` / ``bwd``, ``24.18 →`` /
``31.22``), or *fixed*, which never folds. The widest text column gives up one
character at a time until the table fits; a table that cannot fit returns None,
and the caller lays its rows out another way.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

# Break opportunities: after whitespace, or after "-" / "+" between two letters.
_PIECE = re.compile(r"\S+?(?:(?<=[A-Za-z][-+])(?=[A-Za-z])|(?=\s)|$)\s*")


@dataclass(frozen=True)
class Column:
    header: str
    justify: str = "left"  # "left" | "right"
    fold: bool = True  # text: folds at boundaries; False: never folds (numbers)


def pieces(text: str) -> list[str]:
    """``text`` cut at its break opportunities (each piece keeps its trailing space)."""
    return _PIECE.findall(text) or [text]


def shortest(text: str) -> int:
    """The narrowest width ``text`` folds to: its longest unbreakable piece."""
    return max((len(p.rstrip()) for line in text.split("\n") for p in pieces(line)), default=0)


def fold(text: str, width: int) -> str:
    """``text`` folded to lines of at most ``width`` at break opportunities only (a
    piece longer than ``width`` stays whole on its own line)."""
    out = []
    for line in text.split("\n"):
        current = ""
        for piece in pieces(line):
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
    lines (wrapped at spaces by the console), so nothing is cut at any width."""
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
            label = " ".join(column.header.split())
            console.print(f"  {label}: ", cell, sep="", highlight=False)
