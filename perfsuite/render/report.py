"""``perfsuite report RESULTS.json --format md|latex|csv|html [-o FILE]``: the paper's table.

One table per (N, V, D, dtype, softcap, workload), laid out as the paper's:
method rows, fwd / bwd / fwd+bwd column groups of memory and time, sections by
β (largest first), the lower-bound row at the top of each section, N/A where a
method does not apply, numbers with units, the best of each column in bold.
Grouping, status labels and marks are ``perfsuite.render.table``'s, shared with the
console table.

Analytic columns (math.md, ``perfsuite.render.roofline``): the lower-bound row holds
the memory floor, and in each phase's third column the FLOPs of the cell; on a
known GPU (H100, H200, A100) its time column holds the roofline time and the
methods' third column the measured fraction of it; elsewhere (CPU, unknown
GPU) the third column is the achieved FLOP rate. The CSV spells every one of
these out per row.
"""

from __future__ import annotations

import argparse
import csv
import html
import io
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfsuite.plan.memory_model import floor_bytes
from perfsuite.plan.registry import all_methods
from perfsuite.render.roofline import GPU, gpu_for_env, phase_flops, roofline_ms
from perfsuite.render.table import (
    by_method,
    cell_marks,
    fmt_bytes,
    fmt_ms,
    footnotes,
    grads_in_forward,
    group_rows,
    measured,
    present_phases,
    shape_key,
    shape_title,
    status_label,
)
from perfsuite.results.results import ResultsError, load_results

FORMATS = ("md", "latex", "csv", "html")
LOWER_BOUND = "lower bound"


def fmt_flops(flops: float) -> str:
    units = ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"))
    for scale, unit in units:
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.3g} FLOP"


def fmt_rate(flops_per_s: float) -> str:
    return fmt_flops(flops_per_s) + "/s"


@dataclass
class Cell:
    text: str = ""
    value: float | None = None  # what "best" compares (lower is better)
    best: bool = False
    comparable: bool = True  # ‡ fwd/bwd split or † interpreted time: never "best"


@dataclass
class Line:
    method: str  # or LOWER_BOUND
    cells: list[Cell]  # per phase: memory, time, analytic
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # phase -> row


@dataclass
class Section:
    beta: float
    lines: list[Line]
    entropy: float | None = None


@dataclass
class PaperTable:
    title: str
    key: tuple  # (N, V, D, dtype, softcap, workload)
    phases: list[str]
    analytic: str  # header of each phase's third column
    sections: list[Section]
    notes: list[str]
    gpu: GPU | None
    shape: str = ""
    device: str = ""


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and v == v]
    return sum(values) / len(values) if values else None


def _method_line(
    name: str,
    by_phase: dict[str, dict[str, Any]],
    phases: list[str],
    key: tuple,
    gpu: GPU | None,
    known: dict[str, Any],
    beta: float,
) -> Line:
    tokens, vocab, hidden, dtype = key[:4]
    in_fwd = grads_in_forward(name, known, beta)
    cells: list[Cell] = []
    for phase in phases:
        row = by_phase.get(phase)
        if row is None:
            cells += [Cell(), Cell(), Cell()]
            continue
        if not measured(row):
            cells += [Cell(status_label(row)), Cell(), Cell()]
            continue
        marks = cell_marks(row, phase, in_fwd)
        fair = not marks  # ‡: fwd/bwd split not comparable; †: interpreted; ✗: wrong
        split_ok = not (in_fwd and phase != "fwd+bwd") and row["status"] == "ok"
        ms = row.get("median_ms")
        analytic = Cell()
        # A ‡ method's fwd/bwd does other work than the phase's FLOPs count: no rate.
        if ms and split_ok:
            flops = phase_flops(phase, tokens, vocab, hidden)
            if gpu is not None:
                frac = roofline_ms(phase, tokens, vocab, hidden, dtype, gpu) / ms
                analytic = Cell(f"{100 * frac:.0f}%{marks}", -frac, comparable=fair)
            else:
                rate = flops / (ms / 1e3)
                analytic = Cell(fmt_rate(rate) + marks, -rate, comparable=fair)
        peak = row.get("peak_bytes")
        cells += [
            Cell(fmt_bytes(peak), peak, comparable=split_ok),
            Cell(fmt_ms(row) + marks, ms, comparable=fair),
            analytic,
        ]
    return Line(name, cells, dict(by_phase))


def _bound_line(phases: list[str], key: tuple, gpu: GPU | None) -> Line:
    tokens, vocab, hidden, dtype = key[:4]
    cells = []
    for phase in phases:
        roof = roofline_ms(phase, tokens, vocab, hidden, dtype, gpu) if gpu else None
        cells += [
            Cell(fmt_bytes(floor_bytes(phase, tokens, vocab, hidden, dtype))),
            Cell("" if roof is None else f"{roof:.3g} ms"),
            Cell(fmt_flops(phase_flops(phase, tokens, vocab, hidden))),
        ]
    return Line(LOWER_BOUND, cells)


def _mark_best(lines: list[Line]) -> None:
    """Bold the lowest value of each column among comparable measured cells."""
    methods = [line for line in lines if line.method != LOWER_BOUND]
    if not methods:
        return
    for col in range(len(methods[0].cells)):
        candidates = [
            line.cells[col]
            for line in methods
            if line.cells[col].value is not None and line.cells[col].comparable
        ]
        if not candidates:
            continue
        low = min(c.value for c in candidates)
        for c in candidates:
            c.best = c.value == low


def build_report(document: dict[str, Any]) -> list[PaperTable]:
    """The paper tables of a results document, format-independent."""
    rows, env = document["rows"], document["env"]
    gpu = gpu_for_env(env)
    known = all_methods()
    tables = []
    for key, members in group_rows(rows, key=shape_key).items():
        phases = present_phases(members)
        sections = []
        betas = group_rows(members, key=lambda r: r["beta"])
        for beta in sorted(betas, reverse=True):
            lines = [_bound_line(phases, key, gpu)]
            for name, by_phase in by_method(betas[beta]).items():
                lines.append(_method_line(name, by_phase, phases, key, gpu, known, beta))
            _mark_best(lines)
            entropy = _mean([r.get("entropy") for r in betas[beta]])
            sections.append(Section(beta, lines, entropy))
        reasons: dict[tuple, list[str]] = {}
        for r in members:
            if r["status"] != "ok" and r.get("reason"):
                what = (r["method"], r["beta"], status_label(r), r["reason"])
                reasons.setdefault(what, []).append(r["phase"])
        notes = [
            f"{method} β={beta:g} ({', '.join(phases)}): {label}: {reason}"
            for (method, beta, label, reason), phases in reasons.items()
        ]
        analytic = "% roofline" if gpu else "FLOP/s"
        device = members[0].get("device", "?")
        where = gpu.name if gpu else (env.get("device") or {}).get("name") or device
        tables.append(
            PaperTable(
                title=f"{shape_title(members)} on {where}",
                key=key,
                phases=phases,
                analytic=analytic,
                sections=sections,
                notes=notes,
                gpu=gpu,
                shape=members[0].get("shape") or "custom",
                device=device,
            )
        )
    return tables


def general_notes(document: dict[str, Any], tables: list[PaperTable]) -> list[str]:
    notes = footnotes(document["rows"])
    gpu = tables[0].gpu if tables else None
    notes.append(
        "lower bound: math.md's memory floor (N fp32 losses for fwd; dE + dC in the input "
        "dtype with a backward) and the FLOPs of each phase (2NVD fwd, 6NVD bwd without "
        "stored logits, 8NVD fwd+bwd)."
    )
    if gpu is not None:
        peaks = ", ".join(f"{d} {t:g}" for d, t in gpu.tflops.items())
        notes.append(
            f"roofline on {gpu.name} (datasheet, dense): max(FLOPs / peak, bytes / "
            f"{gpu.hbm_tb_s:g} TB/s) with peaks {peaks} TFLOP/s; % roofline = roofline time / "
            "measured median (filtering can beat 100%)."
        )
    else:
        notes.append(
            "FLOP/s: the phase's FLOPs over the measured median (no roofline: not a known GPU)."
        )
    notes.append(
        "Bold: the best of its column; times and rates leave ‡ and † cells out, memory "
        "leaves out ‡ fwd/bwd cells. Times are medians."
    )
    return notes


def _section_label(section: Section) -> str:
    return f"{section.beta:g}"


def _entropy_note(table: PaperTable) -> str:
    parts = [f"β={s.beta:g}: {s.entropy:.2f} nats" for s in table.sections if s.entropy is not None]
    return "inputs' mean token entropy " + ", ".join(parts) if parts else ""


def _headers(table: PaperTable) -> list[str]:
    return [f"{phase} {what}" for phase in table.phases for what in ("mem", "time", table.analytic)]


# ---------------------------------------------------------------------------
# Markdown


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_md(document: dict[str, Any]) -> str:
    tables = build_report(document)
    out = []
    for table in tables:
        out.append(f"### {_md_escape(table.title)}\n")
        headers = ["β", "method", *_headers(table)]
        out.append("| " + " | ".join(headers) + " |")
        out.append("|" + "|".join([":--", ":--"] + ["--:"] * (len(headers) - 2)) + "|")
        for section in table.sections:
            for i, line in enumerate(section.lines):
                beta = _section_label(section) if i == 0 else ""
                name = f"*{line.method}*" if line.method == LOWER_BOUND else line.method
                cells = [
                    f"**{_md_escape(c.text)}**" if c.best else _md_escape(c.text)
                    for c in line.cells
                ]
                out.append("| " + " | ".join([beta, name, *cells]) + " |")
        extra = [_entropy_note(table), *table.notes]
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
                beta = _section_label(section) if i == 0 else ""
                name = latex_escape(line.method)
                if line.method == LOWER_BOUND:
                    name = f"\\emph{{{name}}}"
                cells = [
                    f"\\textbf{{{latex_escape(c.text)}}}" if c.best else latex_escape(c.text)
                    for c in line.cells
                ]
                out.append(" & ".join([beta, name, *cells]) + " \\\\")
        out.append("\\bottomrule\n\\end{tabular}")
        extra = [n for n in (_entropy_note(table), *table.notes) if n]
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
                    f'<th rowspan="{len(section.lines)}">{esc(_section_label(section))}</th>'
                    if i == 0
                    else ""
                )
                cells = "".join(f'<td class="num">{_html_text(c)}</td>' for c in line.cells)
                out.append(f"<tr{cls}>{beta}<td>{esc(line.method)}</td>{cells}</tr>")
            out.append("</tbody>")
        out.append("</table>")
        extra = [n for n in (_entropy_note(table), *table.notes) if n]
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
_SUFFIX_FORMAT = {".md": "md", ".tex": "latex", ".csv": "csv", ".html": "html", ".htm": "html"}


def render(document: dict[str, Any], fmt: str) -> str:
    if fmt not in RENDERERS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return RENDERERS[fmt](document)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", type=Path, help="a results file (run, sweep or merge)")
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="md (default), latex, csv or html; inferred from -o's suffix when omitted",
    )
    p.add_argument("-o", "--out", type=Path, help="write here instead of stdout")
    p.add_argument(
        "--paper",
        type=Path,
        help="the paper's table as CSV: print it beside this run as ratios (markdown)",
    )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console(stderr=True)
    fmt = args.format or _SUFFIX_FORMAT.get(args.out.suffix if args.out else "", "md")
    try:
        document = load_results(args.results)
        if args.paper is not None:
            from perfsuite.render.paper_compare import read_paper, side_by_side

            if not args.paper.is_file():
                raise ResultsError(f"--paper {args.paper}: no such file")
            text = side_by_side(document, read_paper(args.paper))
        else:
            text = render(document, fmt)
    except ResultsError as err:
        console.print(f"[red]error:[/red] {err}")
        return 2
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        console.print(f"{fmt} report → {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="perfsuite report", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
