"""The dashboard tests' history: the committed reports plus the issue's synthetic
60-run history with a +5 % step at run 40, and the site written from it."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from history.histories import committed_reports, history

from perfsuite.cli import main

STEP_AT = 40


def dashboard(argv: list[str]) -> int:
    """``perfsuite dashboard ARGV`` as a user types it."""
    return main(["dashboard", *argv])


def figures(page: Path) -> list[dict]:
    """The plotly figures a dashboard page holds."""
    blocks = re.findall(r'<script type="application/json" class="figure"[^>]*>(.*?)</script>',
                        page.read_text(), flags=re.S)  # fmt: skip
    return [json.loads(b) for b in blocks]


@dataclass(frozen=True)
class Site:
    db: Path
    out: Path
    demo: Path  # the synthetic runs' results files, demo-000.json ...

    def demo_sha(self, run: int) -> str:
        return json.loads((self.demo / f"demo-{run:03d}.json").read_text())["env"]["git"]["sha"]

    def pages(self) -> list[Path]:
        return sorted(self.out.glob("*.html"))


def build_site(root: Path) -> Site:
    db, demo, out = root / "history.sqlite", root / "demo", root / "site"
    assert history(["import", "--db", str(db), str(committed_reports(root))]) == 0
    argv = ["demo", "-o", str(demo), "--runs", "60", "--step", "0.05", "--step-at", str(STEP_AT)]
    assert history(argv) == 0
    assert history(["import", "--db", str(db), str(demo)]) == 0
    assert dashboard(["--db", str(db), "-o", str(out)]) == 0
    return Site(db, out, demo)


@pytest.fixture(scope="session")
def history_site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    """Built once for the whole session (~10 s of plotly figures): under pytest-xdist in
    the folder its workers share, by the first worker to ask, the others waiting on a
    lock. The tests only read it."""
    pytest.importorskip("plotly")
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # this run's folder, above each worker's own
    root = base / "dashboard-site"
    with open(base / "dashboard-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / "built"
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)  # a worker that failed midway
            root.mkdir()
            build_site(root)
            done.touch()
    return Site(root / "history.sqlite", root / "site", root / "demo")
