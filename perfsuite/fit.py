"""The one table engine: a table declared once (``Grid``, numbered ``Notes``), drawn for the
console or as markdown. On the console it fits the terminal, folds text only after a space
or a hyphen or plus between letters (rich cuts with ``…``), never folds a number, drops
optional columns before a name folds; what cannot fit is a block per row, nothing cut."""

from __future__ import annotations

import bisect
import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rich import box
from rich.console import Console
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

# Break opportunities: after whitespace, or after "-" / "+" between two letters.
_PIECE = re.compile(r"\S+?(?:(?<=[A-Za-z][-+])(?=[A-Za-z])|(?=\s)|$)\s*")
# ... and, in a path, after a slash.
_PATH_PIECE = re.compile(r"\S+?(?:(?<=[A-Za-z][-+])(?=[A-Za-z])|(?<=/)(?=[^/\s])|(?=\s)|$)\s*")


# The suite's table look: a rule under the headers, no edges, one space between columns.
BOX: dict[str, Any] = dict(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                           title_justify="left")  # fmt: skip


@dataclass(frozen=True)
class Column:
    header: str
    justify: str = "left"  # "left" | "right"
    fold: bool = True  # text: folds at boundaries; False: never folds (numbers)
    optional: bool = False  # left out, first, when the table does not fit the console


class Notes(dict[str, list[str]]):
    """A table's numbered notes: each reason once, numbered in first-seen order, with the
    names (methods, cells) it applies to. The one numbering of every table's notes."""

    def ref(self, reason: str, name: str = "") -> str:
        """``(n)``, the reason's number, with ``name`` (if any) listed under it."""
        names = self.setdefault(reason, [])
        if name and name not in names:
            names.append(name)
        return f"({list(self).index(reason) + 1})"

    def lines(self) -> list[str]:
        """``(1) ours, liger: why``; ``(1) why`` where no name was given."""
        return [
            f"({i}) {', '.join(who) + ': ' if who else ''}{why}"
            for i, (why, who) in enumerate(self.items(), 1)
        ]


@dataclass
class Grid:
    """A table declared once (cells: console markup, a style at most), drawn by ``print`` and
    ``markdown``. ``parts``: (title, column indices) of the tables it is drawn as when it is
    too wide whole (the loss table a phase at a time)."""

    columns: Sequence[Column]
    rows: list[list[str]]
    title: str = ""
    notes: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # rich ``Table``'s
    parts: Sequence[tuple[str, Sequence[int]]] = ()

    def print(self, console: Console) -> bool:
        """Fitted to ``console``, then its notes; True when optional columns were left out.
        With optional columns, text does not fold until they are out."""
        options = {**self.options, "title": self.title or None}
        folds = not any(c.optional for c in self.columns)
        every = range(len(self.columns))
        keep = [i for i in every if not self.columns[i].optional]
        for shown in [every] if folds else [every, keep]:
            columns = [replace(self.columns[i], fold=self.columns[i].fold and folds) for i in shown]
            table = fit_table(columns, [[r[i] for i in shown] for r in self.rows],
                              console.width, **options)  # fmt: skip
            if table is not None:
                console.print(table)
                break
        else:
            for i, (title, shown) in enumerate(self.parts or [(self.title, every)]):
                if i:
                    console.print()
                rows = [[r[j] for j in shown] for r in self.rows]
                part = [self.columns[j] for j in shown]
                print_fitted(console, part, rows, **{**options, "title": title or None})
            shown = every
        for note in self.notes:
            console.print(note, markup=False, highlight=False)
        return len(shown) < len(self.columns)

    def markdown(self, left: Iterable[str] | None = None) -> list[str]:
        """A pipe table of every column (no terminal to fit), styles dropped; ``left``: the
        headers that align left (default: the columns declared so)."""
        headers = [" ".join(c.header.split()) for c in self.columns]
        if left is None:
            left = [h for h, c in zip(headers, self.columns, strict=True) if c.justify == "left"]
        rows = [[Text.from_markup(c).plain for c in row] for row in self.rows]
        return pipe_table(headers, rows, left)


def pieces(text: str, path: bool = False) -> list[str]:
    """``text`` cut at its break opportunities (each piece keeps its trailing space)."""
    return (_PATH_PIECE if path else _PIECE).findall(text) or [text]


def _fill(parts: Iterable[str], width: int, first: str = "", indent: str = "") -> list[str]:
    """``parts`` in lines of at most ``width`` (a part wider stays whole on its own line):
    the first line after ``first``, the others after ``indent``."""
    lines, current = [], first
    for part in parts:
        if current.strip() and len((current + part).rstrip()) > width:
            lines.append(current.rstrip())
            current = indent
        current += part
    lines.append(current.rstrip())
    return lines


def fold(text: str, width: int, path: bool = False) -> str:
    """``text`` folded to lines of at most ``width`` at break opportunities only."""
    return "\n".join(out for line in text.split("\n") for out in _fill(pieces(line, path), width))


def _text(cell: str | Text) -> tuple[Text, Any]:
    """A cell as rich text, and the style its folded text keeps."""
    text = cell if isinstance(cell, Text) else Text.from_markup(cell)
    return text, text.spans[0].style if text.spans else text.style


def _styled(cell: str | Text, width: int | None) -> Text:
    text, style = _text(cell)
    return text if width is None else Text(fold(text.plain, width), style=style)


def _width(cell: str | Text) -> tuple[int, int]:
    """The widest line of ``cell``, and the narrowest it folds to: its longest unbreakable
    piece."""
    lines = _text(cell)[0].plain.split("\n")
    shortest = max((len(p.rstrip()) for line in lines for p in pieces(line)), default=0)
    return max(map(len, lines)), shortest


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
    """A table of ``rows`` no wider than ``width`` (None when even fully folded it is wider);
    a line under each row in ``sections``; ``table_options`` go to rich's ``Table``."""
    limits, floors = [], []
    for i, col in enumerate(columns):
        widths = [_width(col.header), *(_width(row[i]) for row in rows)]
        cells = max((n for n, _ in widths[1:]), default=0)
        # a number column never folds its cells; its header folds to the cells' width
        words = max((len(w) for w in col.header.split()), default=0)  # "fwd+bwd" stays whole
        limits.append(max(n for n, _ in widths) if col.fold else -max(cells, words))
        floors.append(max(f for _, f in widths))
    # Folded as far as it goes and still too wide: one space between columns.
    tight = {**table_options, "padding": (0, 0), "collapse_padding": False}
    for options in (table_options, tight):
        # Folded as far as it goes: if that is too wide, no step on the way fits (a
        # table of many rows took seconds to find out, one narrowing at a time).
        folded = [max(f, 1) if lim > 0 else lim for lim, f in zip(limits, floors, strict=True)]
        if not fits(_build(columns, rows, folded, sections, options), width):
            continue
        # The widest text column narrowed a step at a time down to the fully folded table
        # (the last step, known to fit): a narrower step never widens the table, so the
        # first step that fits is bisected (a render a step took seconds).
        trial, steps = list(limits), [list(limits)]
        while shrinkable := [i for i, lim in enumerate(trial) if lim > max(floors[i], 1)]:
            trial[max(shrinkable, key=lambda i: trial[i])] -= 1
            steps.append(list(trial))
        first = bisect.bisect_left(
            steps,
            True,
            hi=len(steps) - 1,
            key=lambda s, o=options: fits(_build(columns, rows, s, sections, o), width),
        )
        return _build(columns, rows, steps[first], sections, options)
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
    title: str | None = None,
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
    if table_options.get("caption"):
        console.print(table_options["caption"], highlight=False)


def _hanging(head: str, cell: str | Text, width: int) -> Text:
    """``head`` then ``cell`` folded at its break opportunities, further lines indented
    under the label (rich's own wrap began them at column 0, after a dangling space)."""
    text, style = _text(cell)
    indent = " " * (len(head) - len(head.lstrip()) + 2)
    parts = (p for line in text.plain.split("\n") for p in pieces(line))
    lines = _fill(parts, width, head, indent)
    out = Text(lines[0][: len(head)])
    out.append("\n".join([lines[0][len(head) :], *lines[1:]]), style=style)
    return out


class TrimmedConsole(Console):
    """rich's console, but a line written to a file ends at its last character: rich pads
    tables, titles and log lines to the full width (80 columns of spaces in a pipe)."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        text = super()._render_buffer(buffer)
        if self.is_terminal:  # a live display redraws its lines: leave them as they are
            return text
        *lines, last = text.split("\n")  # the last line goes on in the next write
        return "\n".join([*(line.rstrip(" ") for line in lines), last])


def pipe_table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], left: Iterable[str] = ()
) -> list[str]:
    """A markdown table, unpadded (no terminal to fit; a changed cell is a one-line diff):
    the ``left`` headers' columns align left, the rest right; ``|`` escaped in the cells."""
    left = set(left)

    def row(cells: Sequence[str]) -> str:
        return "| " + " | ".join(map(md_escape, cells)) + " |"

    rule = "|" + "|".join(":--" if h in left else "--:" for h in headers) + "|"
    return [row(headers), rule, *(row(r) for r in rows)]


def md_escape(text: str) -> str:
    """``text`` as one markdown line that no ``|`` splits."""
    return text.replace("|", "\\|").replace("\n", " ")
