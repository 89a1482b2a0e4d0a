"""`perfsuite dashboard`: the site's files, its plots against the history, its links,
offline use, and one-line errors. (The browser tests are in test_dashboard_browser.py,
the TP series in tests/history/test_tp_history.py.)"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from history.histories import history, make_document

from render.conftest import STEP_AT, Site, dashboard, figures

plotly = pytest.importorskip("plotly")


@pytest.fixture(scope="module")
def small_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 12-run demo history with its step at run 8: the site's options and files, not
    its plots, are under test, and the full history's site took 12 s a build."""
    root = tmp_path_factory.mktemp("small")
    argv = ["demo", "-o", str(root / "demo"), "--runs", "12", "--step-at", "8"]
    assert history(argv) == 0
    assert history(["import", "--db", str(root / "db.sqlite"), str(root / "demo")]) == 0
    return root / "db.sqlite"


def test_one_plot_per_drawable_configuration(history_site: Site) -> None:
    conn = sqlite3.connect(history_site.db)
    (expected,) = conn.execute(
        """SELECT COUNT(*) FROM (SELECT DISTINCT r.device_name, c.tokens, c.vocab, c.hidden,
               c.dtype, c.beta, c.phase, c.softcap, c.workload
           FROM cells c JOIN runs r ON r.id = c.run_id
           WHERE c.status = 'ok'
             AND ((c.median_ms > 0 AND NOT c.interpreted) OR c.peak_bytes > 0))"""
    ).fetchone()
    shapes = {s or "" for (s,) in conn.execute("SELECT DISTINCT shape FROM cells")}
    conn.close()
    pages = [p for p in history_site.pages() if p.name != "index.html"]
    assert sum(len(figures(p)) for p in pages) == expected > 20
    titles = {re.search(r"<h1>(.*?)</h1>", p.read_text()).group(1) for p in pages}
    assert titles <= shapes and {"demo", "gemma2-2b", "smoke"} <= titles
    index = (history_site.out / "index.html").read_text()
    for page in pages:
        assert f'href="{page.name}"' in index


def test_the_demo_step_is_marked_at_its_run_and_points_name_commits(history_site: Site) -> None:
    page = (history_site.out / "shape-demo.html").read_text()
    marks = re.findall(r'<tr class="mark (\w+)" data-position="(\d+)" data-metric="(\w+)" '
                       r'data-method="([\w-]+)"', page)  # fmt: skip
    opened = [(int(pos), metric, method) for state, pos, metric, method in marks if state == "open"]
    # ours is slowed in each of its 6 cells (2 betas x 3 phases); nothing else moves.
    assert len(opened) == 6
    assert all(abs(pos - STEP_AT) <= 1 and m == "time" and who == "ours" for pos, m, who in opened)
    for fig in figures(history_site.out / "shape-demo.html"):
        line = next(t for t in fig["data"] if t.get("mode") == "lines+markers")
        commits = [c[0] for c in line["customdata"]]  # each point names its commit
        assert len(commits) == 60 == len(set(commits))
        assert "commit %{customdata[0]}" in line["hovertemplate"]
        lines = [s for s in fig["layout"]["shapes"] if s["line"]["color"] == "#d62728"]
        # on the time panel and again on the relative one
        assert len(lines) == 2 and all(abs(line["x0"] - STEP_AT) <= 1 for line in lines)
        (label,) = fig["layout"]["annotations"][3:]  # after the three panel titles
        size = float(re.search(r"([+-][\d.]+)% ours", label["text"]).group(1))
        commit = re.fullmatch(r"index.html#commit-(\w+)", label["name"]).group(1)
        assert abs(size - 5) < 0.6 and commit in {
            history_site.demo_sha(STEP_AT + d) for d in (-1, 0, 1)
        }
    index = (history_site.out / "index.html").read_text()
    assert index.count('class="open-regression"') == 6


def test_offline_plotly_next_to_the_pages(history_site: Site) -> None:
    from plotly.offline import get_plotlyjs

    bundle = history_site.out / "plotly.min.js"
    assert bundle.read_text() == get_plotlyjs()
    for page in history_site.pages():
        text = page.read_text()
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), page.name
        if page.name != "index.html":
            assert '<script src="plotly.min.js"></script>' in text


def test_commit_url_template_github_default_and_stale_pages(
    small_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild removes the pages of shapes gone from the history, and nothing else."""
    out = tmp_path / "site"
    out.mkdir()
    (out / "shape-gone.html").write_text("old")
    (out / "notes.txt").write_text("mine")
    template = "https://git.example/repo/-/commit/{sha}"
    assert dashboard(["--db", str(small_db), "-o", str(out), "--commit-url", template]) == 0
    assert 'href="https://git.example/repo/-/commit/' in (out / "shape-demo.html").read_text()
    assert not (out / "shape-gone.html").exists() and (out / "notes.txt").exists()
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "owner/perfsuite")
    assert dashboard(["--db", str(small_db), "-o", str(out)]) == 0
    assert 'href="https://github.com/owner/perfsuite/commit/' in (out / "index.html").read_text()


def test_the_relative_panel_shows_the_step_at_a_glance(history_site: Site) -> None:
    """Issue 20: a +5 % step on ours (~20 ms) beside eager (~60 ms) moved a few pixels
    on one linear time axis; the relative panel puts each method over its own first
    segment, so the step is 5 % of that panel and eager stays flat at 1."""
    for fig in figures(history_site.out / "shape-demo.html"):
        relative = {t["name"]: t for t in fig["data"] if t.get("yaxis") == "y2"}
        assert set(relative) == {"ours", "eager"}
        ours = dict(zip(relative["ours"]["x"], relative["ours"]["y"], strict=True))
        before = [v for x, v in ours.items() if x < STEP_AT - 1]
        after = [v for x, v in ours.items() if x > STEP_AT + 1]
        assert abs(sum(before) / len(before) - 1) < 0.01
        assert 0.04 < sum(after) / len(after) - 1 < 0.06
        assert all(abs(v - 1) < 0.03 for v in relative["eager"]["y"])


def test_the_index_and_history_check_give_one_answer_on_busy_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A step measured only on a busy machine is the other load, not the code (issue 20):
    `history check` leaves those times out, says so, and calls it only with --accept-busy;
    the index listed it as an open regression all the same (+700 %, +7,860 %)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    for i in range(30):
        doc = make_document(i, factor=1.5 if i >= 20 else 1.0)
        if i >= 20:  # the slow runs are the busy ones: the load, not the code
            doc["env"]["machine"] = {"groups": [{"group": "ours", "busy": ["2 of 2 cores"]}]}
        (runs / f"run-{i:02d}.json").write_text(json.dumps(doc))
    db = tmp_path / "history.sqlite"
    assert history(["import", "--db", str(db), str(runs)]) == 0

    def answers(*busy: str) -> tuple[int, int, int]:
        capsys.readouterr()
        code = history(["check", "--db", str(db), *busy])
        out = capsys.readouterr().out
        opened = int(re.search(r"(\d+) open regressions", out).group(1))
        site = tmp_path / f"site{len(busy)}"
        assert dashboard(["--db", str(db), "-o", str(site), *busy]) == 0
        listed = (site / "index.html").read_text().count('class="open-regression"')
        assert (code == 1) == (opened > 0)
        return opened, listed, out.count("its times are left out")

    assert answers() == (0, 0, 10)  # a note a busy run
    assert answers("--accept-busy") == (1, 1, 0)
