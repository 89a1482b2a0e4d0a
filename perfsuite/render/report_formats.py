"""The paper's table (``table.build_report``) by pandas' own writers: markdown, LaTeX
(booktabs), HTML and CSV (every number in its own column); markdown and CSV add the cells
across ranks."""

from __future__ import annotations

import html
import re
from itertools import product
from typing import Any

import pandas as pd

from perfsuite.fit import md_escape, pipe_table
from perfsuite.plan.memory_model import floor_bytes
from perfsuite.plan.registry import methods_for
from perfsuite.render.cells import (
    by_cell,
    cell_marks,
    grads_in_forward,
    group_rows,
    known_methods,
    measured,
    shape_key,
    status_label,
)
from perfsuite.render.roofline import GPU, gpu_for_env, phase_flops, roofline_ms
from perfsuite.render.table import LOWER_BOUND, PaperTable, build_report, general_notes, mean
from perfsuite.render.tp_table import shard_rows, tp_footnotes, tp_rows, tp_tables

BETA, METHOD = "β", "method"


def paper_frame(table: PaperTable) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``table`` as frames indexed by (β, method), columns phase × (mem, time, analytic): the
    cells as a reader sees them, and which are their column's best (each writer bolds them)."""
    columns = pd.MultiIndex.from_product([table.phases, ["mem", "time", table.analytic]])
    lines = [(f"{s.beta:g}", line) for s in table.sections for line in s.lines]
    index = pd.MultiIndex.from_tuples([(b, ln.method) for b, ln in lines], names=[BETA, METHOD])
    text = pd.DataFrame([[c.text for c in ln.cells] for _, ln in lines], index, columns)
    best = pd.DataFrame([[c.best for c in ln.cells] for _, ln in lines], index, columns, bool)
    return text, best


def markdown_table(text: pd.DataFrame, best: pd.DataFrame) -> str:
    """One pipe table: β shown once per section, best cells bold, lower bound italic."""
    shown = text.mask(best, "**" + text + "**")
    shown.columns = [f"{phase} {what}" for phase, what in shown.columns]
    flat = shown.reset_index()
    flat[BETA] = flat[BETA].mask(flat[BETA].duplicated(), "")
    flat[METHOD] = flat[METHOD].mask(flat[METHOD] == LOWER_BOUND, f"*{LOWER_BOUND}*")
    return "\n".join(pipe_table(list(flat.columns), flat.values.tolist(), [BETA, METHOD]))


def render_md(document: dict[str, Any]) -> str:
    tables = build_report(document)
    out = []
    for table in tables:
        out += [f"### {md_escape(table.title)}\n", markdown_table(*paper_frame(table)), ""]
        out += [*(f"- {md_escape(n)}" for n in table.notes), ""]
    if tables:  # one paragraph each (a hard break's two trailing spaces read as padding)
        out.extend(line for n in general_notes(document, tables) for line in (n, ""))
    across = tp_tables(document["rows"])  # every column: markdown has no width
    out += [""] if across else []
    for table in across:
        out += [f"### {md_escape(table.title)}\n", *table.markdown(["method"]), ""]
        out += [*(f"- {md_escape(n)}" for n in table.notes), ""] if table.notes else []
    out.extend(f"{md_escape(n)}  " for n in tp_footnotes(across, document["rows"]))
    return "\n".join(out).rstrip() + "\n"


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "‡": r"$^\ddagger$", "†": r"$^\dagger$", "✗": r"$\times$", "β": r"$\beta$", "×": r"$\times$",
    "≈": r"$\approx$", "→": r"$\rightarrow$", "…": r"\ldots{}", "<": r"$<$",
}  # fmt: skip


def latex_escape(text: str) -> str:
    """LaTeX's specials and the tables' marks, for text outside math mode."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def latex_tabular(text: pd.DataFrame, best: pd.DataFrame) -> str:
    """The booktabs tabular of one table (``Styler.to_latex``), a midrule between β sections."""
    styler = (
        text.style.hide(names=True)
        .apply(lambda _: best.map(lambda b: "textbf:--rwrap;" if b else ""), axis=None)
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
        column_format="ll" + "r" * len(text.columns),
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
        out.append(latex_tabular(*paper_frame(table)).rstrip("\n"))
        if table.notes:
            out.append("\\par\\footnotesize " + latex_escape("; ".join(table.notes)))
        out.append("\\end{table}\n")
    out.extend(f"% {latex_escape(n)}" for n in general_notes(document, tables))
    return "\n".join(out) + "\n"


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


def html_table(text: pd.DataFrame, best: pd.DataFrame, title: str, uuid: str) -> str:
    """One table (``Styler.to_html``): best cells and lower-bound rows carry a class."""
    classes = best.map(lambda b: "best" if b else "")
    bound = text.index.get_level_values(METHOD) == LOWER_BOUND
    classes = classes.mask(pd.Series(bound, index=text.index), "bound " + classes, axis=0)
    styler = (
        text.style.hide(names=True)
        .set_td_classes(classes)
        .set_caption(html.escape(title))
        .format(escape="html")
        .format_index(escape="html", axis=1)
        .format_index(lambda beta: f"β = {beta}", axis=0, level=0)
        .format_index(escape="html", axis=0, level=1)
    )
    # Classes, not per-cell CSS: the page's style sheet says what they look like.
    empty = '<style type="text/css">\n</style>\n'
    return styler.to_html(table_uuid=uuid, cell_ids=False).replace(empty, "")


def render_html(document: dict[str, Any]) -> str:
    esc = html.escape
    tables = build_report(document)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>perfsuite report</title>',
        f"<style>{_CSS}</style></head><body>",
    ]
    for i, table in enumerate(tables):
        out.append(html_table(*paper_frame(table), table.title, f"t{i}").rstrip("\n"))
        if table.notes:
            out.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in table.notes) + "</ul>")
    notes = "<br>".join(esc(n) for n in general_notes(document, tables))
    out += [f"<p>{notes}</p>", "</body></html>"]
    return "\n".join(out) + "\n"


PER_PHASE = (
    "status", "mem_mib", "ms", "p20_ms", "p80_ms", "marks", "floor_mib", "gflop", "roofline_ms",
    "roofline_frac", "achieved_tflop_s",
)  # fmt: skip
# A measured cell's numbers: (column, row field, scale; 0: a count). The last three (per
# phase after PER_PHASE) only in a document with TP cells.
NUMBERS = (
    ("mem_mib", "peak_bytes", 2**20), ("ms", "median_ms", 1), ("p20_ms", "p20_ms", 1),
    ("p80_ms", "p80_ms", 1), ("collectives", "collectives", 0),
    ("collective_mib", "collective_bytes", 2**20), ("collective_ms", "collective_ms", 1),
)  # fmt: skip
LEADING = (
    "shape", "tokens", "vocab", "hidden", "dtype", "softcap", "workload", "entropy_nats", "device",
    "gpu", "beta", "method", "tp", "deterministic",
)  # fmt: skip


def _slug(phase: str) -> str:
    return phase.replace("+", "")


def _phase_fields(
    phase: str, row: dict[str, Any] | None, in_fwd: bool, key: tuple, gpu: GPU | None
) -> dict[str, Any]:
    """The ``<phase>_*`` columns of one line; a TP cell's per rank (its 1/K share)."""
    tokens, vocab, hidden, dtype = key[:4]
    s, k = _slug(phase), (row or {}).get("tp") or 1
    flops = phase_flops(phase, tokens, vocab, hidden) / k
    floor = floor_bytes(phase, tokens, shard_rows(vocab, k), hidden, dtype)
    roof = roofline_ms(phase, tokens, vocab, hidden, dtype, gpu) if gpu else None
    out: dict[str, Any] = {
        f"{s}_floor_mib": f"{floor / 2**20:.6g}",
        f"{s}_gflop": f"{flops / 1e9:.6g}",
        f"{s}_roofline_ms": "" if roof is None else f"{roof:.6g}",
    }
    if row is None:
        return out
    out[f"{s}_status"] = status_label(row)
    # A cell across ranks carries its marks only where it has numbers (the TP tables').
    one = row.get("tp") is None
    out[f"{s}_marks"] = cell_marks(row, phase, in_fwd) if measured(row) or one else ""
    if not measured(row):
        return out
    for column, field, scale in NUMBERS:
        if row.get(field) is not None:
            out[f"{s}_{column}"] = f"{row[field] / scale:.6g}" if scale else str(row[field])
    if ms := row.get("median_ms"):
        out[f"{s}_achieved_tflop_s"] = f"{flops / (ms / 1e3) / 1e12:.6g}"
        if roof is not None:
            out[f"{s}_roofline_frac"] = f"{roof / ms:.4f}"
    return out


def _record(
    head: dict,
    method: str,
    by_phase: dict[str, dict],
    phases: list[str],
    known: dict,
    gpu: GPU | None,
) -> dict[str, Any]:
    """One CSV line: ``head`` (the shape and β), the method's, then per phase its columns."""
    seen = {r.get("deterministic") for r in by_phase.values()} - {None}
    tp = next(iter(by_phase.values()), {}).get("tp")
    out = {
        **head,
        "method": method,
        "tp": "" if tp is None else tp,
        # Measured by the worker (two calls, every bit); blank where not measured.
        "deterministic": "" if not seen else ("yes" if seen == {True} else "no"),
    }
    in_fwd = grads_in_forward(method, known, head["beta"])
    key = (head["tokens"], head["vocab"], head["hidden"], head["dtype"])
    for phase in phases:
        out.update(_phase_fields(phase, by_phase.get(phase), in_fwd, key, gpu))
    return out


def _head(key: tuple, first: dict[str, Any], gpu: GPU | None, beta: float, entropy: Any) -> dict:
    softcap = "" if key[4] is None else key[4]
    return {
        "shape": first.get("shape") or "custom",
        **dict(zip(LEADING[1:7], (*key[:4], softcap, key[5]), strict=True)),
        "entropy_nats": "" if entropy is None else f"{entropy:.4f}",
        "device": first.get("device", "?"),
        "gpu": gpu.name if gpu else "",
        "beta": beta,
    }


def report_frame(document: dict[str, Any]) -> pd.DataFrame:
    """Every line of ``document``'s paper tables, then those across ranks; a column per number."""
    tables = build_report(document)
    gpu = gpu_for_env(document["env"])
    known = known_methods(document)
    records = []
    for table in tables:
        for section in table.sections:
            head = _head(table.key, table.first, gpu, section.beta, section.entropy)
            for line in section.lines:
                name = "lower_bound" if line.method == LOWER_BOUND else line.method
                record = _record(head, name, line.rows, table.phases, known, gpu)
                named = product(map(_slug, table.phases), ("mem", "time", "analytic"))
                cells = zip(named, line.cells, strict=True)
                best = (f"{phase}_{what}" for (phase, what), c in cells if c.best)
                record["best"] = ";".join(best)
                records.append(record)
    across = []  # a line per (shape, β, method, TP size) of the cells measured across ranks
    groups = group_rows(tp_rows(document["rows"]), key=shape_key)
    # the methods across ranks, their own capabilities: asked only when there are such cells
    tp_known = methods_for("tp") if groups else {}
    for key, members in groups.items():
        for beta, group in sorted(group_rows(members, key=lambda r: r["beta"]).items()):
            entropy = mean([r.get("entropy") for r in group])
            for (method, _), by_phase in by_cell(group).items():
                head = _head(key, next(iter(by_phase.values())), None, beta, entropy)
                across.append(_record(head, method, by_phase, list(by_phase), tp_known, None))
    present = {r["phase"] for r in document["rows"]} if across else set()
    phases = [
        p for p in ("fwd", "bwd", "fwd+bwd") if p in present or any(p in t.phases for t in tables)
    ]
    fields = PER_PHASE + tuple(c for c, _, _ in NUMBERS[4:] if across)
    columns = [*LEADING, *(f"{_slug(p)}_{f}" for p in phases for f in fields), "best"]
    return pd.DataFrame.from_records(records + across, columns=columns).astype(object)


def render_csv(document: dict[str, Any]) -> str:
    return report_frame(document).to_csv(index=False, lineterminator="\n")


RENDERERS = {"md": render_md, "latex": render_latex, "csv": render_csv, "html": render_html}
FORMATS = tuple(RENDERERS)


def render(document: dict[str, Any], fmt: str) -> str:
    """``document``'s paper tables in ``fmt`` (one of ``FORMATS``: argparse's choices)."""
    return RENDERERS[fmt](document)
