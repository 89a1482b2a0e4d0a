"""The paper's table (``paper_table``) printed as markdown, LaTeX (booktabs),
HTML or CSV, one renderer per format."""

from __future__ import annotations

import csv
import html
import io
from typing import Any

from perfsuite.plan.memory_model import floor_bytes
from perfsuite.plan.registry import all_methods
from perfsuite.render.paper_table import (
    LOWER_BOUND,
    Cell,
    build_report,
    column_headers,
    entropy_note,
    general_notes,
    section_label,
)
from perfsuite.render.roofline import phase_flops, roofline_ms
from perfsuite.render.table import (
    cell_marks,
    grads_in_forward,
    measured,
    status_label,
)

FORMATS = ("md", "latex", "csv", "html")


# ---------------------------------------------------------------------------
# Markdown


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_md(document: dict[str, Any]) -> str:
    tables = build_report(document)
    out = []
    for table in tables:
        out.append(f"### {_md_escape(table.title)}\n")
        headers = ["β", "method", *column_headers(table)]
        out.append("| " + " | ".join(headers) + " |")
        out.append("|" + "|".join([":--", ":--"] + ["--:"] * (len(headers) - 2)) + "|")
        for section in table.sections:
            for i, line in enumerate(section.lines):
                beta = section_label(section) if i == 0 else ""
                name = f"*{line.method}*" if line.method == LOWER_BOUND else line.method
                cells = [
                    f"**{_md_escape(c.text)}**" if c.best else _md_escape(c.text)
                    for c in line.cells
                ]
                out.append("| " + " | ".join([beta, name, *cells]) + " |")
        extra = [entropy_note(table), *table.notes]
        out.append("")
        out.extend(f"- {_md_escape(n)}" for n in extra if n)
        out.append("")
    out.extend(f"{n}  " for n in general_notes(document, tables))
    return "\n".join(out).rstrip() + "\n"


# ---------------------------------------------------------------------------
# LaTeX (booktabs)

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "‡": r"$^\ddagger$",
    "†": r"$^\dagger$",
    "β": r"$\beta$",
    "×": r"$\times$",
    "≈": r"$\approx$",
    "→": r"$\rightarrow$",
    "…": r"\ldots{}",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def render_latex(document: dict[str, Any]) -> str:
    tables = build_report(document)
    out = ["% perfsuite report; needs \\usepackage{booktabs}"]
    for table in tables:
        n = len(table.phases)
        out.append("\\begin{table}[t]\n\\centering\n\\small")
        out.append(f"\\caption{{{latex_escape(table.title)}}}")
        out.append("\\begin{tabular}{ll" + "rrr" * n + "}")
        out.append("\\toprule")
        groups = " & ".join(f"\\multicolumn{{3}}{{c}}{{{latex_escape(p)}}}" for p in table.phases)
        out.append(f" & & {groups} \\\\")
        out.append("".join(f"\\cmidrule(lr){{{3 + 3 * i}-{5 + 3 * i}}}" for i in range(n)))
        sub = " & ".join(f"mem & time & {latex_escape(table.analytic)}" for _ in table.phases)
        out.append(f"$\\beta$ & method & {sub} \\\\")
        out.append("\\midrule")
        for k, section in enumerate(table.sections):
            if k:
                out.append("\\midrule")
            for i, line in enumerate(section.lines):
                beta = section_label(section) if i == 0 else ""
                name = latex_escape(line.method)
                if line.method == LOWER_BOUND:
                    name = f"\\emph{{{name}}}"
                cells = [
                    f"\\textbf{{{latex_escape(c.text)}}}" if c.best else latex_escape(c.text)
                    for c in line.cells
                ]
                out.append(" & ".join([beta, name, *cells]) + " \\\\")
        out.append("\\bottomrule\n\\end{tabular}")
        extra = [n for n in (entropy_note(table), *table.notes) if n]
        if extra:
            out.append("\\par\\footnotesize " + latex_escape("; ".join(extra)))
        out.append("\\end{table}\n")
    out.extend(f"% {latex_escape(n)}" for n in general_notes(document, tables))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# HTML

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { padding: 0.25em 0.6em; border-bottom: 1px solid #ddd; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.bound td { font-style: italic; color: #555; }
tbody { border-top: 2px solid #888; }
caption { text-align: left; font-weight: bold; }
""".strip()


def _html_text(cell: Cell) -> str:
    text = html.escape(cell.text)
    return f"<strong>{text}</strong>" if cell.best else text


def render_html(document: dict[str, Any]) -> str:
    esc = html.escape
    tables = build_report(document)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>perfsuite report</title>',
        f"<style>{_CSS}</style></head><body>",
    ]
    for table in tables:
        out.append(f"<table><caption>{esc(table.title)}</caption><thead>")
        out.append(
            '<tr><th rowspan="2">β</th><th rowspan="2">method</th>'
            + "".join(f'<th colspan="3">{esc(p)}</th>' for p in table.phases)
            + "</tr>"
        )
        out.append(
            "<tr>"
            + "".join(
                f"<th>mem</th><th>time</th><th>{esc(table.analytic)}</th>" for _ in table.phases
            )
            + "</tr></thead>"
        )
        for section in table.sections:
            out.append("<tbody>")
            for i, line in enumerate(section.lines):
                cls = ' class="bound"' if line.method == LOWER_BOUND else ""
                beta = (
                    f'<th rowspan="{len(section.lines)}">{esc(section_label(section))}</th>'
                    if i == 0
                    else ""
                )
                cells = "".join(f'<td class="num">{_html_text(c)}</td>' for c in line.cells)
                out.append(f"<tr{cls}>{beta}<td>{esc(line.method)}</td>{cells}</tr>")
            out.append("</tbody>")
        out.append("</table>")
        extra = [n for n in (entropy_note(table), *table.notes) if n]
        if extra:
            out.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in extra) + "</ul>")
    notes = general_notes(document, tables)
    out.append("<p>" + "<br>".join(esc(n) for n in notes) + "</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# CSV: one line per (table, β, method), every number in its own column


def _slug(phase: str) -> str:
    return phase.replace("+", "")


def render_csv(document: dict[str, Any]) -> str:
    tables = build_report(document)
    phases = [p for p in ("fwd", "bwd", "fwd+bwd") if any(p in t.phases for t in tables)]
    per_phase = (
        "status",
        "mem_mib",
        "ms",
        "p20_ms",
        "p80_ms",
        "marks",
        "floor_mib",
        "gflop",
        "roofline_ms",
        "roofline_frac",
        "achieved_tflop_s",
    )
    fields = [
        "shape",
        "tokens",
        "vocab",
        "hidden",
        "dtype",
        "softcap",
        "workload",
        "entropy_nats",
        "device",
        "gpu",
        "beta",
        "method",
        *(f"{_slug(p)}_{f}" for p in phases for f in per_phase),
        "best",
    ]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    known = all_methods()
    for table in tables:
        tokens, vocab, hidden, dtype, softcap, workload = table.key
        for section in table.sections:
            for line in section.lines:
                out: dict[str, Any] = {
                    "shape": table.shape,
                    "tokens": tokens,
                    "vocab": vocab,
                    "hidden": hidden,
                    "dtype": dtype,
                    "softcap": "" if softcap is None else softcap,
                    "workload": workload,
                    "entropy_nats": "" if section.entropy is None else f"{section.entropy:.4f}",
                    "device": table.device,
                    "gpu": table.gpu.name if table.gpu else "",
                    "beta": section.beta,
                    "method": "lower_bound" if line.method == LOWER_BOUND else line.method,
                }
                best = []
                for i, phase in enumerate(table.phases):
                    s = _slug(phase)
                    flops = phase_flops(phase, tokens, vocab, hidden)
                    roof = (
                        roofline_ms(phase, tokens, vocab, hidden, dtype, table.gpu)
                        if table.gpu
                        else None
                    )
                    out[f"{s}_floor_mib"] = (
                        f"{floor_bytes(phase, tokens, vocab, hidden, dtype) / 2**20:.6g}"
                    )
                    out[f"{s}_gflop"] = f"{flops / 1e9:.6g}"
                    out[f"{s}_roofline_ms"] = "" if roof is None else f"{roof:.6g}"
                    for j, what in enumerate(("mem", "time", "analytic")):
                        if line.cells[3 * i + j].best:
                            best.append(f"{s}_{what}")
                    row = line.rows.get(phase)
                    if row is None:
                        continue
                    out[f"{s}_status"] = status_label(row)
                    out[f"{s}_marks"] = cell_marks(
                        row, phase, grads_in_forward(line.method, known, section.beta)
                    )
                    if not measured(row):
                        continue
                    if row.get("peak_bytes") is not None:
                        out[f"{s}_mem_mib"] = f"{row['peak_bytes'] / 2**20:.6g}"
                    for f in ("median_ms", "p20_ms", "p80_ms"):
                        if row.get(f) is not None:
                            out[f"{s}_{'ms' if f == 'median_ms' else f}"] = f"{row[f]:.6g}"
                    ms = row.get("median_ms")
                    if ms:
                        out[f"{s}_achieved_tflop_s"] = f"{flops / (ms / 1e3) / 1e12:.6g}"
                        if roof is not None:
                            out[f"{s}_roofline_frac"] = f"{roof / ms:.4f}"
                out["best"] = ";".join(best)
                writer.writerow(out)
    return buf.getvalue()


RENDERERS = {"md": render_md, "latex": render_latex, "csv": render_csv, "html": render_html}


def render(document: dict[str, Any], fmt: str) -> str:
    if fmt not in RENDERERS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return RENDERERS[fmt](document)
