"""The dashboard in a real browser (headless Chromium): every page loads without an
error, every plot renders, the demo's +5 % step is drawn at run 40, filters work. Pages
are served over loopback HTTP (as GitHub Pages serves them; Chromium caches the compiled
plotly bundle between pages), the demo page opened from disk. Skipped, saying why, where
no Chromium-like browser is installed (``.ci/run`` installs one)."""

from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from history.histories import history, make_document

from render.browser import Browser, PageReport, find_browser
from render.conftest import STEP_AT, Site, dashboard

EXECUTABLE = find_browser()
pytestmark = pytest.mark.skipif(
    EXECUTABLE is None,
    reason="no Chromium-like browser on PATH (apt-get install chromium; .ci/run installs it)",
)

PLOTS = """(() => {
  const plots = Array.from(document.querySelectorAll('div.plot'));
  return plots.map(p => ({
    plotly: p.classList.contains('js-plotly-plot'),
    svgs: p.querySelectorAll('svg.main-svg').length,
    traces: p.querySelectorAll('.scatterlayer .trace').length,
    shapes: p.querySelectorAll('.shapelayer path').length,
    redLines: ((p.layout && p.layout.shapes) || [])
      .filter(s => s.line.color === '#d62728').map(s => s.x0),
  }));
})()"""
# Click every label of every plot; the URLs the page's openCommit was asked to open.
CLICKS = """(() => Array.from(document.querySelectorAll('div.plot')).map(p =>
  Array.from(p.querySelectorAll('text.annotation-text')).map(text => {
    window.__opened = null;
    text.dispatchEvent(new MouseEvent('click', {bubbles: true}));
    return window.__opened;
  }).filter(url => url !== null)))()"""
ALL_DRAWN = (
    "Array.from(document.querySelectorAll('div.plot'))"
    ".every(p => p.querySelector('svg.main-svg .scatterlayer'))"
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    assert EXECUTABLE is not None
    with Browser(EXECUTABLE, tmp_path_factory.mktemp("chromium") / "profile") as b:
        yield b


@pytest.fixture(scope="module")
def served(history_site: Site) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(history_site.out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    thread.join()


CHOOSE = """(() => {{
  const s = document.querySelector('select[data-field="{field}"]');
  s.value = '{value}';
  s.dispatchEvent(new Event('change'));
}})()"""
VISIBLE = """({
  shown: Number(document.getElementById('shown').textContent),
  betas: Array.from(document.querySelectorAll('section.group'))
    .filter(s => s.style.display !== 'none').map(s => s.dataset.beta),
  widths: Array.from(document.querySelectorAll('section.group'))
    .filter(s => s.style.display !== 'none')
    .map(s => s.querySelector('svg.main-svg').getAttribute('width')),
})"""


@pytest.fixture(scope="module")
def demo(history_site: Site, browser: Browser) -> PageReport:
    """The demo page opened from disk, once (each load costs seconds of plotly): its plots
    read; every label clicked (openCommit caught, not followed); β filtered to 0.1 and
    read; β back to all, the phase filter set and unset, and read again."""
    catch = "window.openCommit = url => { window.__opened = url; }"
    steps = [("beta", "0.1"), ("beta", "*"), ("phase", "fwd"), ("phase", "*")]
    first, *again = (CHOOSE.format(field=field, value=value) for field, value in steps)
    filters = f"(() => {{ {first}; const beta = {VISIBLE}; {';'.join(again)}; "
    filters += f"return [beta, {VISIBLE}]; }})()"
    page = (history_site.out / "shape-demo.html").as_uri()
    return browser.load(page, f"[{PLOTS}, {CLICKS}, {filters}]", ALL_DRAWN, catch)


def test_every_page_renders_every_plot_without_errors(
    history_site: Site, browser: Browser, served: str, demo: PageReport
) -> None:
    """Served over HTTP, but the demo page, which is read from disk."""
    pages = history_site.pages()
    assert len(pages) >= 4
    links = "Array.from(document.querySelectorAll('a.shape')).map(a => a.getAttribute('href'))"
    for page in pages:
        expected = page.read_text().count('class="figure"')
        if page.name == "shape-demo.html":
            report, plots = demo, demo.probe[0]
        else:
            report = browser.load(served + page.name, f"[{PLOTS}, {links}]", ALL_DRAWN)
            plots, linked = report.probe
        assert report.errors == [], (page.name, report.errors)
        assert len(plots) == expected, page.name
        for i, plot in enumerate(plots):
            assert plot["plotly"] and plot["svgs"] >= 1 and plot["traces"] >= 1, (page.name, i)
        if page.name == "index.html":
            assert sorted(linked) == sorted(p.name for p in pages if p.name != "index.html")


def test_demo_step_drawn_at_its_run_and_its_label_opens_the_commit(
    history_site: Site, demo: PageReport
) -> None:
    plots, clicked, _ = demo.probe
    assert len(plots) == 6  # 2 betas x 3 phases, both methods in each
    near = {history_site.demo_sha(STEP_AT + d) for d in (-1, 0, 1)}
    for plot, opened in zip(plots, clicked, strict=True):
        # One open change, drawn on the time panel and again on the relative panel.
        (x,) = set(plot["redLines"])
        assert len(plot["redLines"]) == 2 and abs(x - STEP_AT) <= 1 and plot["shapes"] >= 2
        (link,) = opened
        assert re.fullmatch(r"index\.html#commit-\w+", link) and link.split("-")[-1] in near


def test_filters_hide_and_show_plots(demo: PageReport) -> None:
    beta, both = demo.probe[2]
    assert beta["shown"] == 3 and beta["betas"] == ["0.1"] * 3
    assert both["shown"] == 6 and sorted(both["betas"]) == ["0"] * 3 + ["0.1"] * 3
    assert all(float(w) > 100 for w in both["widths"])


def test_the_check_sees_errors_and_missing_plots(
    history_site: Site, browser: Browser, tmp_path: Path
) -> None:
    """The checks above can fail: a broken page reports its errors, and a site without
    its plotly bundle draws no plot."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
        '<script src="missing.js"></script>'
        "<script>console.error('deliberate'); throw new Error('boom');</script></body></html>"
    )
    report = browser.load(bad.as_uri())
    text = "\n".join(report.errors)
    assert len(report.errors) == 3 and "deliberate" in text and "boom" in text, text
    assert "missing.js" in text
    broken = tmp_path / "site"
    shutil.copytree(history_site.out, broken)
    (broken / "plotly.min.js").unlink()
    report = browser.load((broken / "shape-demo.html").as_uri(), probe=PLOTS)
    assert report.errors and not any(p["plotly"] for p in report.probe)


def test_names_from_the_data_cannot_break_the_page(browser: Browser, tmp_path: Path) -> None:
    """A method and shape named like markup are shown as text, not run."""
    hostile = "</script><script>console.error('injected')</script><!--"
    for i in range(3):
        document = make_document(i)
        document["rows"][0] |= {"method": hostile, "shape": f"<b>{hostile}"}
        (tmp_path / f"run-{i}.json").write_text(json.dumps(document))
    db, out = tmp_path / "h.sqlite", tmp_path / "site"
    assert history(["import", "--db", str(db), str(tmp_path)]) == 0
    assert dashboard(["--db", str(db), "-o", str(out)]) == 0
    (page,) = out.glob("shape-*.html")
    legend = "Array.from(document.querySelectorAll('.legendtext')).map(t => t.textContent)"
    probe = f"[{PLOTS}, {legend}, document.title]"
    report = browser.load(page.as_uri(), probe=probe, ready=ALL_DRAWN)
    plots, names, title = report.probe
    assert report.errors == [] and len(plots) == 1 and plots[0]["traces"] >= 1
    assert hostile in names and title.startswith(f"<b>{hostile}")
