"""A method declared once, in one file (docs/development.md, "Add a method (one file)"):
listed by ``methods`` and measured by ``run --tp``, ``step`` and ``converge`` (the last in
tests/converge/test_cli.py's sweep) through ``PERFSUITE_PLUGINS``, and loaded through the
``perfsuite.methods`` entry-point group too."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from plugins import use_plugins

from perfsuite.cli import main
from perfsuite.method import Case
from perfsuite.plan.registry import all_methods, get_method, methods_for
from perfsuite.results.results import load_results

TESTS = Path(__file__).resolve().parent
PLUGIN = TESTS / "plugins" / "one_file_method.py"
RECIPE = TESTS.parent / "docs" / "development.md"
NAME = "one-file"


@pytest.fixture
def one_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin on PERFSUITE_PLUGINS, here and in every worker started."""
    use_plugins(monkeypatch, "plugins.one_file_method")
    monkeypatch.setenv("COLUMNS", "200")  # whole names in the tables read below


def cli(*argv: str) -> tuple[int, str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        code = main(list(argv))
    return code, printed.getvalue()


def test_the_recipe_is_the_plugin_file():
    """The doc's code block is the file the tests below run, byte for byte."""
    section = RECIPE.read_text().split("## Add a method (one file)", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None and block.group(1) == PLUGIN.read_text()


def test_one_declaration_serves_every_kind(one_file, tmp_path, monkeypatch):
    """Listed by ``methods`` and ``methods --tp``, beside an entry point's; its one
    declaration serves each kind. A plugin without methods: tests/test_bad_input.py."""
    _entry_point(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for argv in (["methods"], ["methods", "--tp"]):
        code, printed = cli(*argv)
        assert code == 0 and NAME in printed and "ep-method" in printed
    assert get_method("ep-method").kinds == ("loss", "tp", "step", "train")
    method = get_method(NAME)
    assert method.kinds == ("loss", "tp", "step", "train")
    assert all(NAME in methods_for(kind) for kind in ("loss", "tp", "step", "train"))
    assert methods_for("tp")[NAME].caps == method.caps  # one declaration, its tp a hook
    # Methods only across ranks are declared methods too, with no loss of their own.
    megatron = all_methods()["megatron"]
    assert megatron.kinds == ("tp",) and "megatron" not in methods_for("loss")
    assert "declares no loss" in (megatron.lacks("loss") or "")


def test_a_file_in_the_tree_is_a_method(tmp_path, monkeypatch):
    """The registry reads every module of perfsuite.baselines: no list to edit."""
    from perfsuite import baselines

    (tmp_path / "throwaway.py").write_text(PLUGIN.read_text().replace("one-file", "in-tree"))
    monkeypatch.setattr(baselines, "__path__", [*baselines.__path__, str(tmp_path)])
    assert get_method("in-tree").kinds == ("loss", "tp", "step", "train")


def test_memory_and_compilation_are_declared_not_named():
    from perfsuite.method import Capabilities, Holds
    from perfsuite.plan.memory_model import predicted_peak

    methods = all_methods()
    assert methods["torch-compile"].compiles and not methods["eager"].compiles
    assert methods["torch-compile"].caps.holds == Holds("compiled", (2.0, 4.0))
    size = (4096, 65536, 1024, "bf16")
    eager = predicted_peak(methods["eager"].caps, *size, softcap=True)
    held = predicted_peak(Capabilities(holds=Holds(copies=(10.0, 12.0))), *size, softcap=True)
    assert "gate" in eager[1] and "~12 copies" in held[1] and held[0] > eager[0]
    # Liger's softcap needs CUDA: its declaration says so, for run and step alike.
    case = Case(64, 64, 64, "fp32", softcap=30.0, device="cpu")
    assert "interpreter" in (methods["liger"].unsupported_reason(case) or "")


def _entry_point(root: Path) -> None:
    """An installed distribution whose ``perfsuite.methods`` entry point names a module."""
    (root / "ep_method.py").write_text(PLUGIN.read_text().replace('"one-file"', '"ep-method"'))
    info = root / "ep_method-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-method\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[perfsuite.methods]\nep = ep_method\n")


SMALL = ["--tokens", "48", "--vocab", "301", "--hidden", "16", "--dtype", "fp32", "--beta", "0"]
QUICK = ["--phases", "fwd+bwd", "--samples", "2", "--warmup", "0", "--timeout", "300"]


@pytest.mark.integration
def test_run_measures_the_plugin_in_a_loss_cell_and_across_ranks(one_file, tmp_path):
    """This file through PERFSUITE_PLUGINS (its folder on the worker's and the ranks'
    PYTHONPATH, as an entry point's would be): a loss cell, then 2 gloo ranks, V uneven. The
    entry point's declaration is read by the registry every process runs:
    test_one_declaration_serves_every_kind."""
    for tp, kind in ((), "loss"), (("--tp", "2"), "tp"):
        out = tmp_path / f"{kind}.json"
        code, printed = cli("run", *SMALL, *QUICK, *tp, "--methods", NAME, "--out", str(out))
        assert code == 0, printed
        cells = {(r["method"], r["kind"], r["status"]) for r in load_results(out)["rows"]}
        assert cells == {(NAME, kind, "ok")}, cells


@pytest.mark.integration
def test_step_measures_the_plugin(smoke_run):
    """The session's smoke step run (tests/conftest.py) has the plugin on PERFSUITE_PLUGINS."""
    assert smoke_run.code == 0, smoke_run.out
    rows = smoke_run.rows(shape="smoke", method=NAME)
    assert rows and {r["status"] for r in rows} == {"ok"}
