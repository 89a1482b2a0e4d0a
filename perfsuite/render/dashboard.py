"""``perfsuite dashboard [--db PATH] -o DIR``: the benchmark history as a static site (no
server, no network): ``index.html``, a ``shape-NAME.html`` per shape, and plotly's bundle
beside them; change points and verdicts are ``history check``'s."""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

from perfsuite.history import changepoints, store, timelines
from perfsuite.history.cli import db_option
from perfsuite.results.outpath import check_output_dir
from perfsuite.results.results import write_atomically

PAGE_GLOB = "shape-*.html"


class DashboardError(ValueError):
    """Why the dashboard cannot be written (one line, exit code 2)."""


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


def build(
    conn: sqlite3.Connection,
    out: Path,
    commit_url: Callable[[str], str],
    title: str,
    source: str,
    accept_busy: bool = False,
) -> list[Path]:
    """Write the site into ``out``; returns the pages written (index first)."""
    from plotly.offline import get_plotlyjs

    from perfsuite.render import dashboard_figures, dashboard_pages

    shapes = timelines.load(conn, accept_busy)
    taken: set[str] = set()
    pages = []
    for shape, groups in shapes.items():
        colours = dashboard_figures.palette([line.method for g in groups for line in g.lines])
        figures = [
            dashboard_figures.figure(g, colours, commit_url) if g.lines else None for g in groups
        ]
        name = page_name(shape, taken)
        html = dashboard_pages.shape_page(shape, groups, figures, commit_url, title)
        write_atomically(out / name, html)
        pages.append((shape, name, groups))
    write_atomically(out / dashboard_pages.PLOTLY_JS, get_plotlyjs())
    index = dashboard_pages.index_page(title, pages, store.list_runs(conn), commit_url, source)
    write_atomically(out / "index.html", index)
    for stale in out.glob(PAGE_GLOB):
        if stale.name not in taken:
            stale.unlink()
    return [out / "index.html", *(out / name for _, name, _ in pages)]


def run(args: argparse.Namespace) -> int:
    """Write the site; returns the exit code."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        needs = "the dashboard needs plotly: pip install 'perfsuite[dashboard]'"
        raise DashboardError(needs) from None
    commit_url = commit_linker(args.commit_url)
    try:
        conn = store.connect(args.db, create=False, write=False)
    except store.StoreError as err:
        raise DashboardError(str(err)) from None
    source = str(args.db or store.default_db_path())
    out = Path(args.out)
    try:
        out_dir = check_output_dir(out, "-o")
        pages = build(conn, out_dir, commit_url, args.title, source, args.accept_busy)
    except changepoints.RupturesMissing as err:
        raise DashboardError(str(err)) from None
    except (sqlite3.DatabaseError, store.StoreError) as err:
        raise DashboardError(f"{source}: {str(err).splitlines()[0]}") from None
    except OSError as err:
        raise DashboardError(f"-o {out}: cannot write there ({err.strerror or err})") from None
    finally:
        conn.close()
    print(f"{len(pages) - 1} shape pages and the index in {out}: open {out / 'index.html'}")
    return 0
