"""The paper's table (``paper_table``) by pandas' own writers: markdown, LaTeX (booktabs),
HTML and CSV (``report_csv``); what is left here is what pandas cannot know (bold best
cells, the lower-bound row, rules between β sections, titles and notes). Markdown and CSV
add the cells across ranks; LaTeX and HTML leave them out, with a note."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from perfsuite.fit import md_escape, pipe_table
from perfsuite.render.paper_table import (
    PaperTable,
    build_report,
    entropy_note,
    general_notes,
)
from perfsuite.render.report_csv import render_csv
from perfsuite.render.table import LOWER_BOUND
from perfsuite.render.tp_table import tp_footnotes, tp_tables


def _notes(table: PaperTable) -> list[str]:
    return [n for n in (entropy_note(table), *table.notes) if n]


BETA, METHOD = "β", "method"


@dataclass
class PaperFrame:
    """One paper table as pandas frames, rows indexed by (β, method), the lower bound
    first in each β section, columns phase × (mem, time, analytic): ``text`` what a
    reader sees (units and marks included), ``best`` where a cell is its column's best,
    so that each writer bolds it its own way."""

    text: pd.DataFrame
    best: pd.DataFrame


def paper_frame(table: PaperTable) -> PaperFrame:
    """The text and best-cell frames of ``table``."""
    columns = pd.MultiIndex.from_product([table.phases, ["mem", "time", table.analytic]])
    keys, texts, bests = [], [], []
    for section in table.sections:
        for line in section.lines:
            keys.append((f"{section.beta:g}", line.method))
            texts.append([c.text for c in line.cells])
            bests.append([c.best for c in line.cells])
    index = pd.MultiIndex.from_tuples(keys, names=[BETA, METHOD])
    return PaperFrame(
        pd.DataFrame(texts, index=index, columns=columns),
        pd.DataFrame(bests, index=index, columns=columns, dtype=bool),
    )


# ---------------------------------------------------------------------------
# Markdown


def markdown_table(frame: PaperFrame) -> str:
    """One pipe table: β shown once per section, best cells bold, lower bound italic."""
    shown = frame.text.mask(frame.best, "**" + frame.text + "**")
    shown.columns = [f"{phase} {what}" for phase, what in shown.columns]
    flat = shown.reset_index()
    flat[BETA] = flat[BETA].mask(flat[BETA].duplicated(), "")
    flat[METHOD] = flat[METHOD].mask(flat[METHOD] == LOWER_BOUND, f"*{LOWER_BOUND}*")
    return "\n".join(pipe_table(list(flat.columns), flat.values.tolist(), [BETA, METHOD]))


def tp_markdown(document: dict[str, Any]) -> list[str]:
    """The TP tables as markdown lines: every column (no terminal to fit), the notes'
    numbers last; none without a TP cell."""
    tables = tp_tables(document["rows"])
    out = []
    for table in tables:
        out += [f"### {md_escape(table.title)}\n", *table.grid().markdown(["method"]), ""]
        if table.notes:
            out += [*(f"- {md_escape(n)}" for n in table.notes), ""]
    out.extend(f"{md_escape(n)}  " for n in tp_footnotes(tables, document["rows"]))
    return out


def render_md(document: dict[str, Any]) -> str:
    tables = build_report(document)
    out = []
    for table in tables:
        out.append(f"### {md_escape(table.title)}\n")
        out.append(markdown_table(paper_frame(table)))
        out.append("")
        out.extend(f"- {md_escape(n)}" for n in _notes(table))
        out.append("")
    if tables:  # one paragraph each (a hard break's two trailing spaces read as padding)
        out.extend(line for n in general_notes(document, tables) for line in (n, ""))
    if across := tp_markdown(document):
        out.extend(["", *across])
    return "\n".join(out).rstrip() + "\n"


# ---------------------------------------------------------------------------
# LaTeX (booktabs)

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "‡": r"$^\ddagger$", "†": r"$^\dagger$", "✗": r"$\times$", "β": r"$\beta$", "×": r"$\times$",
    "≈": r"$\approx$", "→": r"$\rightarrow$", "…": r"\ldots{}", "<": r"$<$",
}  # fmt: skip


def latex_escape(text: str) -> str:
    """LaTeX's specials and the tables' marks, for text outside math mode."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def latex_tabular(frame: PaperFrame) -> str:
    """The booktabs tabular of one table (``Styler.to_latex``), a midrule between β sections."""
    styler = (
        frame.text.style.hide(names=True)
        .apply(lambda _: frame.best.map(lambda b: "textbf:--rwrap;" if b else ""), axis=None)
        .format(latex_escape)
        .format_index(latex_escape, axis=1)
        .format_index(lambda beta: rf"$\beta = {beta}$", axis=0, level=0)
        .format_index(latex_escape, axis=0, level=1)
        .apply_index(
            lambda names: ["textit:--rwrap;" if n == LOWER_BOUND else "" for n in names],
            axis=0,
            level=1,
        )
    )
    tex = styler.to_latex(
        hrules=True,
        multicol_align="c",
        multirow_align="naive",
        clines="skip-last;index",
        column_format="ll" + "r" * len(frame.text.columns),
    )
    # Styler draws \cline after each β section; booktabs wants \midrule between them.
    tex = re.sub(r"\\cline\{[^}]*\}\n(?=\\bottomrule)", "", tex)
    return re.sub(r"\\cline\{[^}]*\}", r"\\midrule", tex)


def render_latex(document: dict[str, Any]) -> str:
    tables = build_report(document)
    out = ["% perfsuite report; needs \\usepackage{booktabs}"]
    for table in tables:
        out.append("\\begin{table}[t]\n\\centering\n\\small")
        out.append(f"\\caption{{{latex_escape(table.title)}}}")
        out.append(latex_tabular(paper_frame(table)).rstrip("\n"))
        if notes := _notes(table):
            out.append("\\par\\footnotesize " + latex_escape("; ".join(notes)))
        out.append("\\end{table}\n")
    out.extend(f"% {latex_escape(n)}" for n in general_notes(document, tables))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# HTML

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { padding: 0.25em 0.6em; border-bottom: 1px solid #ddd; }
td { text-align: right; font-variant-numeric: tabular-nums; }
th.row_heading { text-align: left; font-weight: normal; }
th.row_heading.level0 { font-weight: bold; vertical-align: top; }
td.best { font-weight: bold; }
td.bound { font-style: italic; color: #555; }
caption { text-align: left; font-weight: bold; }
""".strip()


_EMPTY_STYLE = '<style type="text/css">\n</style>\n'


def html_table(frame: PaperFrame, title: str, uuid: str) -> str:
    """One table (``Styler.to_html``): best cells and lower-bound rows carry a class."""
    classes = frame.best.map(lambda b: "best" if b else "")
    bound = frame.text.index.get_level_values(METHOD) == LOWER_BOUND
    classes = classes.mask(pd.Series(bound, index=frame.text.index), "bound " + classes, axis=0)
    styler = (
        frame.text.style.hide(names=True)
        .set_td_classes(classes)
        .set_caption(html.escape(title))
        .format(escape="html")
        .format_index(escape="html", axis=1)
        .format_index(lambda beta: f"β = {beta}", axis=0, level=0)
        .format_index(escape="html", axis=0, level=1)
    )
    # Classes, not per-cell CSS: the page's style sheet says what they look like.
    return styler.to_html(table_uuid=uuid, cell_ids=False).replace(_EMPTY_STYLE, "")


def render_html(document: dict[str, Any]) -> str:
    esc = html.escape
    tables = build_report(document)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>perfsuite report</title>',
        f"<style>{_CSS}</style></head><body>",
    ]
    for i, table in enumerate(tables):
        out.append(html_table(paper_frame(table), table.title, f"t{i}").rstrip("\n"))
        if notes := _notes(table):
            out.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    notes = general_notes(document, tables)
    out.append("<p>" + "<br>".join(esc(n) for n in notes) + "</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


RENDERERS = {"md": render_md, "latex": render_latex, "csv": render_csv, "html": render_html}
FORMATS = tuple(RENDERERS)


def render(document: dict[str, Any], fmt: str) -> str:
    """``document``'s paper tables in ``fmt`` (one of ``FORMATS``: argparse's choices)."""
    return RENDERERS[fmt](document)
