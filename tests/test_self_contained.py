"""Everything the project reads or cites lives in the repository (issue 20: the README
pointed at a ``shared/reference/`` folder beside the checkout, which a clone does not
have, so ``report --paper`` failed for every user)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tracked() -> list[str]:
    proc = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_no_tracked_text_points_outside_the_repository():
    outside = []
    for name in tracked():
        path = ROOT / name
        if path.is_symlink() or not path.is_file() or path.suffix in (".png", ".json"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if "../" + "shared/" in text:  # spelled apart: this file is tracked too
            outside.append(name)
    assert outside == []


@pytest.mark.integration
def test_report_paper_works_in_a_copy_of_the_checkout(tmp_path):
    """A copy of the tracked files under a folder with no ``shared/`` beside it."""
    clone = tmp_path / "clone" / "perfsuite-checkout"
    for name in tracked():
        source = ROOT / name
        if source.is_symlink():  # perfsuite/kernels -> ../kernels: keep it a link
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(source), clone / name)
        elif source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    assert not (clone.parent / "shared").exists()
    env = {**os.environ, "PYTHONPATH": str(clone), "COLUMNS": "200"}
    # the console script's call, after naming the perfsuite it runs
    script = "import perfsuite, sys; print(perfsuite.__file__); from perfsuite.cli import main"
    argv = [sys.executable, "-c", f"{script}; sys.exit(main())", "report"]
    proc = subprocess.run(
        [*argv, "reports/cpu-smoke/results.json", "--paper"], cwd=clone, env=env,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(str(clone))  # the copy's code ran, not the checkout's
    assert "paper ×CCE" in proc.stdout and "ours_no_grad_filter" in proc.stdout


def test_readme_is_a_front_page_whose_links_resolve():
    """Issue 20: a 770-line README was a manual; the rest lives in docs/, one page per
    command family, and every relative link of the README and the pages resolves."""
    import re

    readme = (ROOT / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) <= 250
    assert "perfsuite run --shape smoke" in lines[3] and "python -m pytest" in lines[4]
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for name in ("run", "sweep-report", "regressions", "history", "converge", "kernel", "math"):
        assert f"(docs/{name}.md)" in readme
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []
