"""The wheel ships kernels and baselines only under the perfsuite namespace:
`kernels` (Hugging Face) and `baselines` are other projects' names on PyPI."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    return next(out.glob("perfsuite-*.whl"))


def test_no_bare_top_level_kernels_or_baselines(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert "kernels" not in tops and "baselines" not in tops, sorted(tops)
    assert any(n.startswith("perfsuite/kernels/") and n.endswith(".py") for n in names)
    assert "perfsuite/baselines/torch_methods.py" in names
    top_level = [n for n in names if n.endswith("top_level.txt")]
    for n in top_level:
        assert zipfile.ZipFile(wheel).read(n).decode().split() == ["perfsuite"]


def test_console_script_declared(wheel):
    entry = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("entry_points.txt"))
    assert "perfsuite = perfsuite.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_source_tree_has_no_bare_imports():
    offenders = []
    for path in ROOT.rglob("*.py"):
        if any(part in {".git", "build", ".venv"} for part in path.parts):
            continue
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith(
                ("import kernels", "import baselines", "from kernels", "from baselines")
            ):
                offenders.append(f"{path.relative_to(ROOT)}: {stripped}")
    assert not offenders
