"""The GitHub workflows: actionlint and zizmor clean, and the safety rules the
nightly GPU job depends on (no pull request ever reaches the self-hosted
runner, actions pinned by SHA, least privilege, clocks always restored)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def load(name: str) -> dict:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load((WORKFLOWS / name).read_text())


def triggers(workflow: dict) -> dict:
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    return {on: None} if isinstance(on, str) else dict(on)


def steps(workflow: dict) -> list[dict]:
    return [s for job in workflow["jobs"].values() for s in job.get("steps", [])]


def test_both_workflows_exist():
    assert {p.name for p in FILES} >= {"ci.yml", "nightly-gpu.yml"}


@pytest.mark.skipif(shutil.which("actionlint") is None, reason="actionlint not installed")
def test_actionlint():
    proc = subprocess.run(
        ["actionlint", "-no-color", *map(str, FILES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
@pytest.mark.parametrize("name", [p.name for p in FILES])
def test_run_scripts_pass_shellcheck(name):
    """What actionlint checks in each ``run:`` (where shellcheck exists, as on GitHub's
    runners), also where actionlint cannot be installed: its PyPI sdist downloads
    the binary from GitHub at build time."""
    for step in steps(load(name)):
        if "run" not in step:
            continue
        script = re.sub(r"\$\{\{[^}]*\}\}", "placeholder", step["run"])
        proc = subprocess.run(
            ["shellcheck", "--norc", "--shell=bash", "--exclude=SC1091,SC2194,SC2050,SC2154", "-"],
            input=script,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, f"{name}: {step.get('name')}\n{proc.stdout}"


@pytest.mark.skipif(shutil.which("zizmor") is None, reason="zizmor not installed")
def test_zizmor():
    proc = subprocess.run(
        ["zizmor", "--offline", "--no-progress", "--color", "never", str(WORKFLOWS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("zizmor") is None, reason="zizmor not installed")
def test_zizmor_would_catch_an_unpinned_action(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\npermissions: {}\njobs:\n  a:\n    runs-on: ubuntu-24.04\n"
        "    permissions:\n      contents: read\n    steps:\n"
        "      - uses: actions/checkout@v4\n        with:\n          persist-credentials: false\n"
    )
    proc = subprocess.run(
        ["zizmor", "--offline", "--no-progress", "--color", "never", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "unpinned" in proc.stdout + proc.stderr


def test_nightly_only_runs_on_schedule_or_dispatch():
    nightly = load("nightly-gpu.yml")
    assert set(triggers(nightly)) == {"schedule", "workflow_dispatch"}
    job = nightly["jobs"]["benchmark"]
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    assert "pull_request" not in job["if"]


def test_ci_never_uses_the_self_hosted_runner():
    ci = load("ci.yml")
    assert set(triggers(ci)) == {"push", "pull_request"}
    for job in ci["jobs"].values():
        assert "self-hosted" not in str(job["runs-on"])


@pytest.mark.parametrize("name", ["ci.yml", "nightly-gpu.yml"])
def test_actions_pinned_and_least_privilege(name):
    workflow = load(name)
    assert workflow["permissions"] == {}
    for job in workflow["jobs"].values():
        assert job["permissions"] == {"contents": "read"}
    for step in steps(workflow):
        if "uses" in step:
            assert PINNED.match(step["uses"]), step["uses"]
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step["with"]["persist-credentials"] is False


def test_nightly_locks_clocks_and_always_restores_them():
    nightly = load("nightly-gpu.yml")
    by_name = {s.get("name", s.get("uses", "")): s for s in steps(nightly)}
    names = list(by_name)
    lock, restore = by_name["Lock GPU clocks"], by_name["Restore GPU clocks"]
    assert "--lock-gpu-clocks" in lock["run"] and "--reset-gpu-clocks" in restore["run"]
    assert restore["if"] == "always()"
    assert (
        names.index("Lock GPU clocks")
        < names.index("Run the suite")
        < names.index("Restore GPU clocks")
    )
    compare = by_name["Compare against the stored baseline"]["run"]
    assert "perfsuite compare reports/baselines" in compare
    assert "GITHUB_STEP_SUMMARY" in compare and 'exit "$status"' in compare
    upload = next(s for s in steps(nightly) if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "always()"


def test_ci_runs_the_readme_commands():
    ci = load("ci.yml")
    runs = "\n".join(s.get("run", "") for s in steps(ci))
    ci_script = (ROOT / ".ci" / "run").read_text()
    assert "pip install -c constraints-cpu.txt -e '.[test]'" in runs
    assert "pip install -c constraints-cpu.txt -e '.[test]'" in ci_script
    for command in ("python -m pytest", "ruff check .", "actionlint", "zizmor"):
        assert command in runs
