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


def by_name(steps: list[dict]) -> dict[str, dict]:
    return {s.get("name", s.get("uses", "")): s for s in steps}


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
@pytest.mark.integration
def test_run_scripts_pass_shellcheck(tmp_path):
    """What actionlint checks in each ``run:`` (where shellcheck exists, as on GitHub's
    runners), also where actionlint cannot be installed: its PyPI sdist downloads
    the binary from GitHub at build time. One shellcheck over every script."""
    scripts = []
    for path in FILES:
        for i, step in enumerate(steps(load(path.name))):
            if "run" in step:
                scripts.append(tmp_path / f"{path.stem}-step{i}.sh")
                scripts[-1].write_text(re.sub(r"\$\{\{[^}]*\}\}", "placeholder", step["run"]))
    assert len(scripts) > 10
    proc = subprocess.run(
        ["shellcheck", "--norc", "--shell=bash", "--exclude=SC1091,SC2194,SC2050,SC2154",
         *map(str, scripts)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout


@pytest.mark.skipif(shutil.which("zizmor") is None, reason="zizmor not installed")
@pytest.mark.integration
def test_zizmor():
    proc = subprocess.run(
        ["zizmor", "--offline", "--no-progress", "--color", "never", str(WORKFLOWS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_pull_request_reaches_the_self_hosted_runner():
    ci = load("ci.yml")
    assert set(triggers(ci)) == {"push", "pull_request"}
    assert all("self-hosted" not in str(job["runs-on"]) for job in ci["jobs"].values())
    nightly = load("nightly-gpu.yml")
    assert set(triggers(nightly)) == {"schedule", "workflow_dispatch"}
    job = nightly["jobs"]["benchmark"]
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    assert "pull_request" not in job["if"]
    # Only the benchmark touches the self-hosted runner; the jobs holding write
    # tokens (history branch, Pages) run on GitHub's throwaway machines.
    for name, other in nightly["jobs"].items():
        if name != "benchmark":
            assert str(other["runs-on"]).startswith("ubuntu-"), name


# Each job's permissions, exactly: read-only unless a job must write, and then
# only what it writes.
PERMISSIONS = {
    "ci.yml": {"cpu": {"contents": "read"}},
    "nightly-gpu.yml": {
        "benchmark": {"contents": "read"},
        "history": {"contents": "write"},  # pushes the perfsuite-history branch
        "pages": {"pages": "write", "id-token": "write"},  # deploy-pages
    },
}


@pytest.mark.parametrize("name", ["ci.yml", "nightly-gpu.yml"])
def test_actions_pinned_and_least_privilege(name):
    workflow = load(name)
    assert workflow["permissions"] == {}
    assert {job: spec["permissions"] for job, spec in workflow["jobs"].items()} == (
        PERMISSIONS[name]
    )
    for step in steps(workflow):
        if "uses" in step:
            assert PINNED.match(step["uses"]), step["uses"]
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step["with"]["persist-credentials"] is False


def test_nightly_locks_clocks_and_always_restores_them():
    nightly = load("nightly-gpu.yml")
    named = by_name(steps(nightly))
    names = list(named)
    lock, restore = named["Lock GPU clocks"], named["Restore GPU clocks"]
    assert "--lock-gpu-clocks" in lock["run"] and "--reset-gpu-clocks" in restore["run"]
    assert restore["if"] == "always()"
    assert (
        names.index("Lock GPU clocks")
        < names.index("Run the suite")
        < names.index("Restore GPU clocks")
    )
    compare = named["Compare against the stored baseline"]["run"]
    assert "perfsuite compare reports/baselines" in compare
    assert "GITHUB_STEP_SUMMARY" in compare and 'exit "$status"' in compare
    upload = next(s for s in steps(nightly) if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "always()"


def test_nightly_keeps_the_history_and_publishes_the_dashboard():
    nightly = load("nightly-gpu.yml")
    job = nightly["jobs"]["history"]
    assert job["needs"] == "benchmark" and "!cancelled()" in job["if"]
    named = by_name(job["steps"])
    order = [
        "Get the stored history",
        "Add the night's runs",
        "Check the history",
        "Build the dashboard",
        "Store the history",
        "Fail on an open regression or a refused results file",
    ]
    assert [n for n in named if n in order] == order
    run = [named[name]["run"] for name in order]
    assert "perfsuite history import --db history/history.sqlite" in run[1]
    assert "perfsuite history check --db history/history.sqlite" in run[2]
    assert "perfsuite dashboard --db history/history.sqlite -o site" in run[3]
    assert "push --quiet" in run[4] and "HISTORY_BRANCH" in run[4]
    assert 'exit "$CHECKED"' in run[5]
    # The night's results come from this run's benchmark artifacts, nowhere else.
    download = next(s for s in job["steps"] if "download-artifact" in s.get("uses", ""))
    upload_name = nightly["jobs"]["benchmark"]["steps"][-1]["with"]["name"]
    assert upload_name == "perfsuite-${{ matrix.shape }}-${{ github.run_id }}"
    assert download["with"]["pattern"] == "perfsuite-*-${{ github.run_id }}"
    pages = nightly["jobs"]["pages"]
    assert pages["needs"] == "history" and "needs.history.outputs.pages" in pages["if"]
    assert named["Hand the dashboard to GitHub Pages"]["if"] == "vars.PERFSUITE_PAGES == 'true'"


def test_ci_runs_the_readme_commands():
    ci = load("ci.yml")
    runs = "\n".join(s.get("run", "") for s in steps(ci))
    ci_script = (ROOT / ".ci" / "run").read_text()
    assert "pip install -c constraints-cpu.txt -e '.[test]'" in runs
    assert "pip install -c constraints-cpu.txt -e '.[test]'" in ci_script
    for command in ("python -m pytest", "ruff check .", "actionlint", "zizmor"):
        assert command in runs


KERNEL_SELECTION = "kernel-report --arch sm_80,sm_90a,sm_100a --dtype bf16"
KERNEL_BASELINE = "--baseline reports/kernel-report/baseline"


def test_ci_gates_the_kernel_code_on_the_stored_baseline():
    """Every push and pull request builds the CI selection at the pinned Triton and
    compares it with the stored baseline, the comparison in the job summary, its exit
    status the step's; the baseline for that Triton and arch set is in the tree."""
    job = load("ci.yml")["jobs"]["cpu"]
    named = by_name(job["steps"])
    step = named["Kernel code against the stored baseline"]
    script = " ".join(step["run"].replace("\\\n", " ").split())
    assert f"perfsuite {KERNEL_SELECTION} --jobs 2 {KERNEL_BASELINE}" in script
    assert "--across-triton" not in script and 'exit "$status"' in script
    assert "GITHUB_STEP_SUMMARY" in script and step["env"]["COLUMNS"] == "80"
    assert "steps.install.outcome == 'success'" in step["if"]
    assert named["Install (as .ci/run)"]["id"] == "install"
    pinned = re.search(r"^triton==(\S+)$", (ROOT / "constraints-cpu.txt").read_text(), re.M)
    stored = ROOT / "reports" / "kernel-report" / "baseline"
    assert (stored / f"triton-{pinned.group(1)}_sm_80-sm_90a-sm_100a.json").is_file()


def test_nightly_prints_the_kernel_diff_beside_its_timing_verdicts():
    job = load("nightly-gpu.yml")["jobs"]["benchmark"]
    names = [s.get("name", s.get("uses", "")) for s in job["steps"]]
    step = job["steps"][names.index("Kernel code since the stored baseline")]
    assert names.index("Compare against the stored baseline") + 1 == names.index(step["name"])
    script = " ".join(step["run"].replace("\\\n", " ").split())
    assert f"-m perfsuite {KERNEL_SELECTION} {KERNEL_BASELINE} --across-triton" in script
    # reports, never fails the job
    assert "GITHUB_STEP_SUMMARY" in script and not re.search(r"^\s*exit\b", step["run"], re.M)
    assert "!cancelled()" in step["if"] and "matrix.shape == 'gemma2-2b'" in step["if"]
    assert "gemma2-2b" in job["strategy"]["matrix"]["shape"]


@pytest.mark.integration
@pytest.mark.slow
def test_nightly_history_steps_run_against_a_local_remote(tmp_path):
    """The history job's shell steps, run in order for two nights with a bare local
    repository as the remote: night 1 starts the branch, night 2 clones it, adds,
    finds the planted step (the last step exits 1) and pushes a second commit."""
    import json
    import os
    import sys

    job = load("nightly-gpu.yml")["jobs"]["history"]
    remote = tmp_path / "server" / "owner" / "repo.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "perfsuite").write_text(f'#!/bin/sh\nexec {sys.executable} -m perfsuite "$@"\n')
    (bin_dir / "perfsuite").chmod(0o755)
    demo = tmp_path / "demo"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    subprocess.run(
        [sys.executable, "-m", "perfsuite", "history", "demo", "-o", str(demo), "--runs", "8",
         "--step-at", "5"], check=True, env=env, capture_output=True,
    )  # fmt: skip
    env |= {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_SERVER_URL": str(tmp_path / "server"),
        "GITHUB_REPOSITORY": "owner/repo",
        "GITHUB_SHA": "0" * 40,
        "GH_TOKEN": "not-a-token",
        **job["env"],
    }
    last = {}
    for night, runs in ((1, range(0, 4)), (2, range(4, 8))):
        work = tmp_path / f"night{night}"
        (work / "results").mkdir(parents=True)
        for i in runs:
            name = f"demo-{i:03d}.json"
            (work / "results" / name).write_text((demo / name).read_text())
        outputs: dict[str, dict[str, str]] = {}
        for step in job["steps"]:
            if "run" not in step or step["name"] == "Install":
                continue
            out = work / "output"
            out.write_text("")
            step_env = {**env, "GITHUB_RUN_ID": str(night), "GITHUB_OUTPUT": str(out)}
            step_env["GITHUB_STEP_SUMMARY"] = str(work / "summary.md")
            for key, value in (step.get("env") or {}).items():
                source = re.search(r"steps\.(\w+)\.outputs\.status", value)
                step_env[key] = outputs[source.group(1)]["status"] if source else "x"
            proc = subprocess.run(
                ["bash", "-e", "-c", step["run"]], cwd=work, env=step_env,
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            outputs[step.get("id", "")] = dict(
                line.split("=", 1) for line in out.read_text().split()
            )
            last[(night, step["name"])] = proc.returncode
        assert (work / "site" / "index.html").exists()
        assert (work / "site" / "history.sqlite").exists()
    fail = "Fail on an open regression or a refused results file"
    assert [rc for (night, name), rc in last.items() if name != fail] == [0] * (len(last) - 2)
    assert (last[(1, fail)], last[(2, fail)]) == (0, 1)
    log = subprocess.run(
        ["git", f"--git-dir={remote}", "log", "--format=%s", "perfsuite-history"],
        capture_output=True, text=True, check=True,
    ).stdout.split("\n")  # fmt: skip
    assert log[:2] == [
        f"history: nightly run 2 of {'0' * 40}",
        f"history: nightly run 1 of {'0' * 40}",
    ]
    check = (tmp_path / "night2" / "check.txt").read_text()
    sha = json.loads((demo / "demo-005.json").read_text())["env"]["git"]["sha"]
    assert "6 open regressions" in check and sha[:10] in check
