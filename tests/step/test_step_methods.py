"""Why a step's method is unavailable, in the import system's own words (issue 45: the
H200's row said "cut_cross_entropy.transformers not installed" where cut-cross-entropy
25.1.1 was installed, its wheel without that module)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfsuite.method import Capabilities, SimpleMethod, StepPatch
from perfsuite.step.runner import availability, why_missing

PACKAGES = ("fakedist_pkg", "broken_pkg", "needs_dep_pkg")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Three packages on sys.path: ``fakedist_pkg`` installed as distribution ``fakedist-pkg``
    1.2 (no ``transformers`` submodule, as cut-cross-entropy 25.1.1's wheel), and two
    whose own import fails: one on a name its dependency dropped (as transformers 5
    dropped ``_CONFIG_FOR_DOC``), one on a dependency that is not installed."""
    sources = ("", "from os import _CONFIG_FOR_DOC\n", "import perfsuite_no_such_dep\n")
    for name, source in zip(PACKAGES, sources, strict=True):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(source)
    info = tmp_path / "fakedist_pkg-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakedist-pkg\nVersion: 1.2\n")
    (info / "top_level.txt").write_text("fakedist_pkg\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [n for n in sys.modules if n.partition(".")[0] in PACKAGES]:
        del sys.modules[name]


def test_installed_without_the_submodule_says_so_with_the_import_error(site: Path) -> None:
    assert why_missing("fakedist_pkg.transformers") == (
        "fakedist-pkg 1.2 is installed without fakedist_pkg.transformers "
        "(ModuleNotFoundError: No module named 'fakedist_pkg.transformers')"
    )


def test_a_parent_that_fails_to_import_gives_its_own_error(site: Path) -> None:
    said = why_missing("broken_pkg.transformers")
    assert said.startswith("broken_pkg.transformers failed to import (ImportError: ")
    assert "cannot import name '_CONFIG_FOR_DOC' from 'os'" in said
    assert why_missing("needs_dep_pkg.transformers") == (
        "needs_dep_pkg.transformers failed to import "
        "(ModuleNotFoundError: No module named 'perfsuite_no_such_dep')"
    )


def test_what_is_absent_or_present(site: Path) -> None:
    assert why_missing("perfsuite_no_such_pkg.transformers") == (
        "perfsuite_no_such_pkg.transformers not installed"
    )
    assert why_missing("fakedist_pkg") is None and why_missing("json.decoder") is None


def test_a_steps_availability_carries_the_reason(site: Path) -> None:
    method = SimpleMethod(
        "fake-patch", "a step patch from a package installed without it",
        caps=Capabilities(devices=frozenset({"cpu"})),
        step=StepPatch(lambda model, preset, beta: model, requires=("fakedist_pkg.transformers",)),
    )  # fmt: skip
    assert availability(method, "cpu") == why_missing("fakedist_pkg.transformers")


@pytest.mark.skipif(
    importlib.util.find_spec("cut_cross_entropy") is None
    or importlib.metadata.version("cut-cross-entropy") != "25.1.1",
    reason="the pinned cut-cross-entropy 25.1.1 is not the one installed",
)
def test_cce_25_1_1_has_no_transformers_patch_module() -> None:
    """The H200's case, on the version pyproject pins: its PyPI wheel ships no patch
    module (apple/ml-cross-entropy#9)."""
    assert why_missing("cut_cross_entropy.transformers") == (
        "cut-cross-entropy 25.1.1 is installed without cut_cross_entropy.transformers "
        "(ModuleNotFoundError: No module named 'cut_cross_entropy.transformers')"
    )
