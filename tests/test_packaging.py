"""The wheel holds every module of the package, kernels and baselines only under the
perfsuite namespace (`kernels` (Hugging Face) and `baselines` are other projects' names
on PyPI), and runs once installed outside the checkout; the test tools are no runtime
dependency."""

from __future__ import annotations

import ast
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]
# Distributions only the tests use, and their import names.
TEST_TOOLS = {"pytest": "pytest", "pytest-xdist": "xdist", "threadpoolctl": "threadpoolctl"}


def _package_modules() -> set[str]:
    """Every .py file of the package as its wheel path, through the kernels and
    baselines symlinks."""
    found = set()
    for folder, dirs, files in os.walk(ROOT / "perfsuite", followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = Path(folder).relative_to(ROOT)
        found |= {(rel / f).as_posix() for f in files if f.endswith(".py")}
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the checkout: a ``build/`` folder left in the tree
    by an earlier build would lend the wheel files the package search no longer finds."""
    src = tmp_path_factory.mktemp("src")
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("perfsuite", "kernels", "baselines"):
        shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*pip, "-w", str(out), str(src)], check=True, capture_output=True)
    return next(out.glob("perfsuite-*.whl"))


@pytest.mark.integration
def test_wheel_holds_every_module_and_only_the_perfsuite_namespace(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"perfsuite", "perfsuite-0.1.0.dist-info"}, sorted(tops)
    shipped = {n for n in names if n.endswith(".py")}
    assert shipped == _package_modules(), {
        "missing": sorted(_package_modules() - shipped),
        "extra": sorted(shipped - _package_modules()),
    }
    assert "perfsuite/harness/lifecycle.py" in shipped  # issue 46: absent from the list
    top_level = next(n for n in names if n.endswith("top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["perfsuite"]
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "perfsuite = perfsuite.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


# Run in the installed venv, the test tools blocked (a .pth line, so the workers too).
_HELPS = """
import sys
import perfsuite
from perfsuite.cli import main
assert perfsuite.__file__.startswith(sys.prefix), (perfsuite.__file__, sys.prefix)
assert not any("editable" in type(f).__module__ for f in sys.meta_path), sys.meta_path
for command in ("sweep", "step", "converge"):
    try:
        main([command, "--help"])
    except SystemExit as exit:
        assert exit.code == 0, (command, exit.code)
    else:
        raise AssertionError(command + " --help did not exit")
print("helps ok")
"""


def _system_packages() -> list[str]:
    """Where this interpreter's packages (torch and the rest) are."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        dirs.append(site.getusersitepackages())
    return dirs


@pytest.mark.integration
def test_installed_wheel_runs_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    """Installed into a fresh venv, run outside the checkout with no PYTHONPATH: it
    measures a cell and answers the help of the commands that import the most of it.
    torch and the rest come from this interpreter's site-packages on a .pth line, so that
    their .pth hooks (the checkout's editable install) lend it nothing it lacks."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps"]
    subprocess.run([*install, "--no-index", "-q", str(wheel)], check=True, capture_output=True)
    site_dir = Path(sysconfig.get_path("purelib", vars={"base": venv, "platbase": venv}))
    (site_dir / "system_packages.pth").write_text("".join(f"{d}\n" for d in _system_packages()))
    blocked = sorted(TEST_TOOLS.values())
    (site_dir / "no_test_tools.pth").write_text(
        f"import sys; sys.modules.update(dict.fromkeys({blocked!r}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["COLUMNS"] = "80"
    away = tmp_path / "elsewhere"
    away.mkdir()
    smoke = ["--shape", "smoke", "--methods", "eager", "--beta", "0", "--phases", "fwd"]
    proc = subprocess.run(
        [str(venv / "bin" / "perfsuite"), "run", *smoke, "--samples", "1", "--warmup", "0",
         "--out", "r.json"],
        cwd=away, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "results: r.json" in proc.stdout and (away / "r.json").is_file()
    helps = subprocess.run(
        [str(python), "-c", _HELPS], cwd=away, env=env, capture_output=True, text=True
    )
    assert helps.returncode == 0 and "helps ok" in helps.stdout, helps.stderr[-2000:]


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_test_tools_are_only_a_test_extra() -> None:
    """No module of the package imports pytest, its plugins or threadpoolctl: they are
    the ``test`` extra's, not what every install pulls in."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(specs: list[str]) -> set[str]:
        return {s.split(">")[0].split("=")[0].split("[")[0].strip().lower() for s in specs}

    assert not names(project["dependencies"]) & TEST_TOOLS.keys()
    assert TEST_TOOLS.keys() <= names(project["optional-dependencies"]["test"])
    importers = {
        module: sorted(_imported_roots(ROOT / module) & set(TEST_TOOLS.values()))
        for module in _package_modules()
    }
    assert not {m: roots for m, roots in importers.items() if roots}


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
