"""``perfsuite dashboard [--db PATH] -o DIR``: the benchmark history as a static site, a page
per shape of plotly figures (JSON one small script draws) and ``history check``'s verdicts."""

from __future__ import annotations

import argparse
import html
import os
import re
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from perfsuite.history import changepoints, store, timelines
from perfsuite.history.cli import db_option
from perfsuite.history.store import Run
from perfsuite.history.timelines import Group, Mark
from perfsuite.results.outpath import check_output_dir
from perfsuite.results.results import write_atomically


class DashboardError(ValueError):
    """Why the dashboard cannot be written (one line, exit code 2)."""


PLOTLY_JS = "plotly.min.js"
FILTERS = (("device", "device"), ("dtype", "dtype"), ("beta", "β"), ("phase", "phase"))

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; padding: 0 1em;
       color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.1em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.open { color: #d62728; font-weight: bold; } .acknowledged, .recovered { color: #c65f00; }
.change { color: #777; } .muted { color: #777; } nav { margin-bottom: 1em; }
.filters label { margin-right: 1em; } section.group { border-top: 1px solid #ccc; }
code { font-size: 0.95em; }
"""

DRAW = """
function openCommit(url) { window.location.href = url; }
for (const node of document.querySelectorAll('script.figure')) {
  const fig = JSON.parse(node.textContent);
  Plotly.newPlot(node.dataset.target, fig.data, fig.layout,
                 {responsive: true, displaylogo: false})
    .then(gd => gd.on('plotly_clickannotation', event => {
      if (event.annotation.name) { openCommit(event.annotation.name); }
    }));
}
function applyFilters() {
  const chosen = {};
  for (const select of document.querySelectorAll('.filters select')) {
    chosen[select.dataset.field] = select.value;
  }
  let shown = 0;
  for (const section of document.querySelectorAll('section.group')) {
    const visible = Object.entries(chosen).every(
      ([field, value]) => value === '*' || section.dataset[field] === value);
    const was = section.style.display !== 'none';
    section.style.display = visible ? '' : 'none';
    if (visible) {
      shown += 1;
      if (!was) { Plotly.Plots.resize(section.querySelector('.plot')); }
    }
  }
  document.getElementById('shown').textContent = shown;
}
for (const select of document.querySelectorAll('.filters select')) {
  select.addEventListener('change', applyFilters);
}
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _table(cls: str, heads: Sequence[str], rows: Sequence[str]) -> str:
    head = "".join(f"<th>{h}</th>" for h in heads)
    return f'<table class="{cls}"><tr>{head}</tr>{"".join(rows)}</table>'


def _page(title: str, body: str, plotly: bool) -> str:
    script = f'<script src="{PLOTLY_JS}"></script>\n' if plotly else ""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<title>{esc(title)}</title>\n<link rel="icon" href="data:,">\n'
        f"<style>{STYLE}</style>\n{script}</head>\n"
        f"<body>\n{body}\n</body>\n</html>\n"
    )


def _filter_value(group: Group, field: str) -> str:
    value = group.key["device_name" if field == "device" else field]
    return f"{value:g}" if field == "beta" else str(value)


def _filters(groups: Sequence[Group]) -> str:
    parts = []
    for field, label in FILTERS:
        values = sorted({_filter_value(g, field) for g in groups})
        options = '<option value="*">all</option>' + "".join(
            f'<option value="{esc(v)}">{esc(v)}</option>' for v in values
        )
        parts.append(f'<label>{esc(label)} <select data-field="{field}">{options}</select></label>')
    return (
        f'<p class="filters">{"".join(parts)} '
        f'<span class="muted"><span id="shown">{len(groups)}</span> of {len(groups)} plots'
        "</span></p>"
    )


def _commit(mark: Mark, commit_url: Callable[[str], str]) -> str:
    return f'<a href="{esc(commit_url(mark.after.sha))}"><code>{esc(mark.after.commit)}</code></a>'


def _marks_table(marks: Sequence[Mark], commit_url: Callable[[str], str]) -> str:
    if not marks:
        return '<p class="muted">No change point.</p>'
    rows = []
    for m in sorted(marks, key=lambda m: (m.after.position, m.metric, m.method)):
        note = "; ".join(m.why_not) if m.state == "change" else m.ident
        state = "not a regression" if m.state == "change" else f"{m.state} regression"
        rows.append(
            f'<tr class="mark {m.state}" data-position="{m.after.position}" '
            f'data-metric="{m.metric}" data-method="{esc(m.method)}" data-state="{m.state}">'
            f"<td>{m.metric}</td><td>{esc(m.method)}</td>"
            f'<td class="num">{m.after.position}</td><td>{_commit(m, commit_url)} '
            f'<span class="muted">after {esc(m.before.commit)}</span></td>'
            f'<td class="num">{m.size:+.1%}</td><td class="{m.state}">{esc(state)}</td>'
            f"<td>{esc(note)}</td></tr>"
        )
    heads = ("metric", "method", "run", "commit", "change", "verdict", "note")
    return _table("marks", heads, rows)


def shape_page(
    shape: str,
    groups: Sequence[Group],
    colours: dict[str, str],
    commit_url: Callable[[str], str],
    title: str,
) -> str:
    """One shape's page: filters, then per group its plot and its change points."""
    from perfsuite.render.dashboard_figures import figure

    sections = []
    for i, group in enumerate(groups):
        data = " ".join(f'data-{f}="{esc(_filter_value(group, f))}"' for f, _ in FILTERS)
        missing = ""
        if group.no_data:
            what = ", ".join(f"{esc(m)} ({esc(s)})" for m, s in sorted(group.no_data.items()))
            missing = f'<p class="muted">Nothing to draw for: {what}.</p>'
        plot = ""
        if group.lines:
            # No "<" may reach the <script> block ("</script>" or "<!--" in a name would end
            # or bend it): plotly's JSON writes it as "\u003c" already; made sure of here.
            fig = figure(group, colours, commit_url).to_json().replace("<", "\\u003c")
            plot = (
                f'<div class="plot" id="plot-g{i}"></div>\n<script type="application/json" '
                f'class="figure" data-target="plot-g{i}">{fig}</script>\n'
                f"{_marks_table(group.marks, commit_url)}\n"
            )
        sections.append(
            f'<section class="group" id="g{i}" {data}>\n<h2>{esc(group.title)}</h2>\n'
            f'<p class="muted">{len(group.runs)} runs, {group.runs[0].created} → '
            f"{group.runs[-1].created}</p>\n{plot}{missing}\n</section>"
        )
    body = (
        f'<nav><a href="index.html">← all shapes</a></nav>\n<h1>{esc(shape)}</h1>\n'
        f"{_filters(groups)}\n" + "\n".join(sections) + f"\n<script>{DRAW}</script>"
    )
    return _page(f"{shape} · {title}", body, plotly=True)


def index_page(
    title: str,
    pages: Sequence[tuple[str, str, Sequence[Group]]],
    runs: Sequence[Run],
    commit_url: Callable[[str], str],
    source: str,
) -> str:
    """Shapes with their open regressions, then every run (anchors for the commits)."""
    shape_rows, open_rows = [], []
    for shape, file, groups in pages:
        devices = sorted({str(g.key["device_name"]) for g in groups})
        n_open = 0
        for i, group in enumerate(groups):
            for m in (m for m in group.marks if m.state == "open"):
                n_open += 1
                open_rows.append(
                    f'<tr class="open-regression"><td><a href="{esc(file)}#g{i}">'
                    f"{esc(group.title)}</a></td><td>{esc(m.method)}</td><td>{m.metric}</td>"
                    f'<td class="num">{m.size:+.1%}</td><td>{_commit(m, commit_url)}</td>'
                    f"<td><code>{esc(m.ident)}</code></td></tr>"
                )
        n_runs = len({r.run_hash for g in groups for r in g.runs})
        shape_rows.append(
            f'<tr><td><a class="shape" href="{esc(file)}">{esc(shape)}</a></td>'
            f'<td>{esc(", ".join(devices))}</td><td class="num">{len(groups)}</td>'
            f'<td class="num">{n_runs}</td><td class="num {"open" if n_open else ""}">'
            f"{n_open}</td></tr>"
        )
    heads = ("plot", "method", "metric", "change", "commit", "ack with")
    none = "<p>No open regression.</p>"
    regressions = _table("regressions", heads, open_rows) if open_rows else none
    shapes = _table("shapes", ("shape", "devices", "plots", "runs", "open regressions"), shape_rows)
    run_rows, anchored = [], set()
    for r in reversed(runs):
        anchor = "" if r.sha in anchored else f' id="commit-{esc(r.sha)}"'
        anchored.add(r.sha)
        dirty = "+dirty" if r.dirty else ""
        run_rows.append(
            f"<tr{anchor}><td>{esc(r.created)}</td><td><code>{esc(r.sha[:10])}{dirty}</code></td>"
            f"<td>{esc(r.device_name)}</td><td><code>{esc(r.env_hash)}</code></td>"
            f'<td class="num">{r.n_cells}</td><td><code>{esc(r.short)}</code></td>'
            f"<td>{esc(r.source)}</td></tr>"
        )
    run_heads = ("time", "commit", "device", "environment", "cells", "run", "file")
    body = (
        f'<h1>{esc(title)}</h1>\n<p class="muted">From <code>{esc(source)}</code>: '
        f"{len(runs)} runs. Regressions are judged by <code>perfsuite history check</code>'s "
        f"rule, on the same series.</p>\n<h2>Open regressions</h2>\n{regressions}\n"
        f"<h2>Shapes</h2>\n{shapes}\n<h2>Runs</h2>\n{_table('runs', run_heads, run_rows)}"
    )
    return _page(title, body, plotly=False)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    db_option(parser, None)
    parser.add_argument("-o", "--out", required=True, metavar="DIR", help="folder for the site")
    parser.add_argument(
        "--commit-url",
        default=None,
        metavar="TEMPLATE",
        help="link for a commit, {sha} replaced (default: GitHub's from $GITHUB_SERVER_URL and "
        "$GITHUB_REPOSITORY, else the run's row on the index page)",
    )
    parser.add_argument("--title", default="perfsuite benchmark history")
    parser.add_argument(
        "--accept-busy",
        action="store_true",
        help="judge the times of runs measured on a busy machine too (as history check's)",
    )


def commit_linker(template: str | None) -> Callable[[str], str]:
    """sha -> URL; ``DashboardError`` for a template without ``{sha}`` or with other fields."""
    if template is None:
        server, repo = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY")
        if server and repo:
            template = f"{server.rstrip('/')}/{repo}/commit/{{sha}}"
        else:
            return lambda sha: f"index.html#commit-{sha}"
    try:
        probe = template.format(sha="0")
    except (KeyError, IndexError, ValueError):
        raise DashboardError(f"--commit-url {template!r}: only {{sha}} may be replaced") from None
    if probe == template:
        raise DashboardError(f"--commit-url {template!r}: has no {{sha}} to replace")
    return lambda sha: template.format(sha=sha)


def page_name(shape: str, taken: set[str]) -> str:
    """``shape-<name>.html`` with only file-name-safe characters, unique among ``taken``."""
    stem = "shape-" + (re.sub(r"[^A-Za-z0-9._-]+", "_", shape).strip("._") or "unnamed")
    name, k = f"{stem}.html", 2
    while name in taken:
        name, k = f"{stem}-{k}.html", k + 1
    taken.add(name)
    return name


def run(args: argparse.Namespace) -> int:
    """Write the site into ``-o`` (the shapes' pages, plotly.js, the index); the exit code."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        needs = "the dashboard needs plotly: pip install 'perfsuite[dashboard]'"
        raise DashboardError(needs) from None
    from perfsuite.render.dashboard_figures import palette

    commit_url = commit_linker(args.commit_url)
    try:
        conn = store.connect(args.db, create=False, write=False)
    except store.StoreError as err:
        raise DashboardError(str(err)) from None
    source = str(args.db or store.default_db_path())
    out = Path(args.out)
    taken: set[str] = set()
    pages = []
    try:
        out_dir = check_output_dir(out, "-o")
        for shape, groups in timelines.load(conn, args.accept_busy).items():
            colours = palette([line.method for g in groups for line in g.lines])
            name = page_name(shape, taken)
            page = shape_page(shape, groups, colours, commit_url, args.title)
            write_atomically(out_dir / name, page)
            pages.append((shape, name, groups))
        write_atomically(out_dir / PLOTLY_JS, get_plotlyjs())
        index = index_page(args.title, pages, store.list_runs(conn), commit_url, source)
        write_atomically(out_dir / "index.html", index)
        for stale in out_dir.glob("shape-*.html"):
            if stale.name not in taken:
                stale.unlink()
    except changepoints.RupturesMissing as err:
        raise DashboardError(str(err)) from None
    except (sqlite3.DatabaseError, store.StoreError) as err:
        raise DashboardError(f"{source}: {str(err).splitlines()[0]}") from None
    except OSError as err:
        raise DashboardError(f"-o {out}: cannot write there ({err.strerror or err})") from None
    finally:
        conn.close()
    print(f"{len(pages)} shape pages and the index in {out}: open {out / 'index.html'}")
    return 0
