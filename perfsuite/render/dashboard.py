"""``perfsuite dashboard [--db PATH] -o DIR``: the benchmark history as a static site.

The site needs no server and no network: ``index.html`` (open regressions,
shapes, every run), one ``shape-NAME.html`` per shape (a plot per device and
configuration, each method's time with its p20-p80 band and peak memory over
the runs, change points marked and linked to their commits, filters by device,
dtype, β and phase), and one shared ``plotly.min.js`` (plotly's own bundle,
written next to the pages). Open ``DIR/index.html`` in a browser.

Change points and verdicts are ``perfsuite history check``'s (``history.rules``), on the
same series: a busy run's times are drawn but not judged, unless ``--accept-busy`` (as
``history check --accept-busy``).
A commit links to ``--commit-url`` (``{sha}`` is replaced), by default the
GitHub commit page when ``$GITHUB_SERVER_URL`` and ``$GITHUB_REPOSITORY`` are
set (as in a workflow), else to the run's row on the index page.

Exit codes: 0 written; 2 bad input (no database, an unusable ``-o``, a bad
``--commit-url``, plotly missing), with a one-line reason.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from perfsuite.history import changepoints, store, timelines
from perfsuite.results.outpath import OutputPathError, check_output_dir

EXIT_OK, EXIT_USAGE = 0, 2
PAGE_GLOB = "shape-*.html"


class DashboardError(ValueError):
    """Why the dashboard cannot be written (one line, exit code 2)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=None,
        metavar="PATH",
        help=f"history database (default ${store.DB_ENV_VAR} or {store.DEFAULT_DB})",
    )
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


def check_out_dir(out: Path) -> Path:
    """Create ``out`` and make sure files can be written there, before any work."""
    try:
        return check_output_dir(out, "-o")
    except OutputPathError as err:
        raise DashboardError(str(err)) from None


def _write(path: Path, text: str) -> None:
    """Atomically: a reader never sees half a page."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    pages, written = [], []
    for shape, groups in shapes.items():
        colours = dashboard_figures.palette([line.method for g in groups for line in g.lines])
        figures = [
            dashboard_figures.figure(g, colours, commit_url) if g.lines else None for g in groups
        ]
        name = page_name(shape, taken)
        html = dashboard_pages.shape_page(shape, groups, figures, commit_url, title)
        _write(out / name, html)
        pages.append((shape, name, groups))
        written.append(out / name)
    _write(out / dashboard_pages.PLOTLY_JS, get_plotlyjs())
    index = dashboard_pages.index_page(title, pages, store.list_runs(conn), commit_url, source)
    _write(out / "index.html", index)
    for stale in out.glob(PAGE_GLOB):
        if stale.name not in taken:
            stale.unlink()
    return [out / "index.html", *written]


def run(args: argparse.Namespace) -> int:
    """Write the site; returns the exit code."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        return _fail("the dashboard needs plotly: pip install 'perfsuite[dashboard]'")
    try:
        commit_url = commit_linker(args.commit_url)
        conn = store.connect(args.db, create=False, write=False)
    except (DashboardError, store.StoreError) as err:
        return _fail(str(err))
    source = str(args.db or store.default_db_path())
    out = Path(args.out)
    try:
        out_dir = check_out_dir(out)
        pages = build(conn, out_dir, commit_url, args.title, source, args.accept_busy)
    except (DashboardError, changepoints.RupturesMissing) as err:
        return _fail(str(err))
    except (sqlite3.DatabaseError, store.StoreError) as err:
        return _fail(f"{source}: {str(err).splitlines()[0]}")
    except OSError as err:
        return _fail(f"-o {out}: cannot write there ({err.strerror or err})")
    finally:
        conn.close()
    print(f"{len(pages) - 1} shape pages and the index in {out}: open {out / 'index.html'}")
    return EXIT_OK


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    from perfsuite.parser import Parser

    parser = Parser(prog="perfsuite dashboard", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
