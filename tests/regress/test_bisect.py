"""`perfsuite bisect` on throwaway repositories: it names the planted slow commit,
leaves the user's checkout (HEAD, index, changes, own bisection) alone, and
refuses bad input in one line."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest

from perfsuite.cli import main as perfsuite_main
from perfsuite.regress.bisect import Spec, read_log, time_command
from perfsuite.regress.bisect import run_step as step_main

# A 50 ms floor, so that a few ms of process start-up jitter stay well under 20 %.
FAST = "sleep 0.05\necho done\n"
SLOW = "sleep 0.05\nsleep 0.1\necho done\n"
pytestmark = pytest.mark.integration  # every test starts git, most perfsuite


def main(argv: list[str]) -> int:
    """``perfsuite bisect ARGV`` as a user types it: its exit status (argparse's refusals
    exit)."""
    try:
        return perfsuite_main(["bisect", *argv])
    except SystemExit as stop:
        return int(stop.code or 0)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


def commit(repo: Path, message: str, **files: str) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def new_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "test@example.com")
    git(path, "config", "user.name", "test")
    return path


@pytest.fixture(scope="module")
def made_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """bench.sh over 5 commits, slow from 3 on (few commits: each step costs ~1 s);
    made once (about 20 git processes), copied for each test."""
    path = new_repo(tmp_path_factory.mktemp("made") / "repo")
    shas = [
        commit(path, "add the benchmark", **{"bench.sh": FAST, "README": "bench\n"}),
        commit(path, "docs", README="bench, documented\n"),
        commit(path, "tidy", **{"bench.sh": "# the benchmark\n" + FAST}),
        commit(path, "slow: sleep in the loop", **{"bench.sh": SLOW}),
        commit(path, "more docs", README="bench, documented more\n"),
    ]
    return path, shas


@pytest.fixture
def repo(made_repo: tuple[Path, list[str]], tmp_path: Path) -> tuple[Path, list[str]]:
    """A copy of that repository of the test's own (a test changes its checkout, its
    index, its refs and its bisection)."""
    made, shas = made_repo
    path = tmp_path / "repo"
    shutil.copytree(made, path, symlinks=True)
    # `git status` also refreshes the index's file stats, which the copy made stale.
    assert git(path, "rev-parse", "HEAD") == shas[-1] and not git(path, "status", "--porcelain")
    return path, list(shas)


def state(repo: Path) -> dict[str, str]:
    """Everything of the user's checkout that bisect must leave as it was."""
    gitdir = Path(git(repo, "rev-parse", "--absolute-git-dir"))
    log = gitdir / "BISECT_LOG"
    return {
        "head": git(repo, "rev-parse", "HEAD"),
        "branch": git(repo, "symbolic-ref", "-q", "HEAD"),
        "status": git(repo, "status", "--porcelain"),
        "staged": git(repo, "diff", "--cached"),
        "changes": git(repo, "diff"),
        "refs": git(repo, "for-each-ref"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "bisect": log.read_text() if log.exists() else "",
    }


def bisect(repo: Path, good: str, bad: str, *extra: str) -> int:
    argv = ["--repo", str(repo), "--good", good, "--bad", bad, "--command", "sh bench.sh"]
    return main([*argv, "--samples", "6", *extra])


def test_finds_the_planted_slow_commit_and_touches_nothing(
    repo: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, shas = repo
    # The user's own state: staged and unstaged changes, and a bisection of their own.
    (path / "README").write_text("edited, not committed\n")
    (path / "new.txt").write_text("staged\n")
    git(path, "add", "new.txt")
    git(path, "bisect", "start", "--no-checkout", shas[4], shas[0])
    before = state(path)
    assert bisect(path, shas[0], shas[4]) == 0
    out = capsys.readouterr().out
    assert f"first slow commit: {shas[3]} slow: sleep in the loop" in out
    assert "note: uncommitted changes" in out
    assert state(path) == before
    # Each commit tried was judged: the ones before the culprit fast or unmeasurable.
    tried = {line.split(":")[0].strip(): line for line in out.splitlines() if "x the good" in line}
    (bad,) = [line for line in out.splitlines() if line.startswith(f"bad  {shas[4][:10]}")]
    assert "regression" in bad and tried[shas[3][:10]].endswith("(slow: sleep in the loop)")
    assert "regression" in tried[shas[3][:10]]
    for sha in shas[1:3]:
        line = tried.get(sha[:10], "")
        assert not line or "same" in line or "improvement" in line
    assert bisect(path, shas[3], shas[4]) == 1  # bad no slower than good
    assert "nothing to bisect" in capsys.readouterr().out and state(path) == before


def test_step_skips_a_commit_it_cannot_measure_and_judges_the_others(
    repo: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git bisect run's exit codes: 125 (skip) for a broken commit, 1 slower, 0 not."""
    path, shas = repo
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    git(path, "checkout", "-q", shas[2])
    timing = dict(samples=6, warmup=1, threshold=0.2, alpha=0.01, command="sh bench.sh")
    good = time_command(Spec(scratch="", **timing), path)
    spec_path = scratch / "spec.json"
    spec_path.write_text(
        json.dumps(asdict(Spec(scratch=str(scratch), good_samples=good, **timing)))
    )
    monkeypatch.chdir(path)
    assert step_main(str(spec_path)) == 0
    git(path, "checkout", "-q", shas[3])
    assert step_main(str(spec_path)) == 1
    (path / "bench.sh").write_text("exit 3\n")
    git(path, "commit", "-qam", "broken")
    assert step_main(str(spec_path)) == 125
    same, slower, broken = read_log(scratch)
    assert same.verdict in ("same", "improvement") and slower.verdict == "regression"
    assert (broken.verdict, broken.note) == ("skip", "--command exited 3")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--repo", "{plain}", "--good", "HEAD~1", "--bad", "HEAD", "--command", "true"],
         "not inside a git repository"),
        (["--good", "nosuchrev", "--bad", "HEAD", "--command", "true"],
         "--good nosuchrev: not a commit"),
        (["--good", "HEAD", "--bad", "HEAD", "--command", "true"], "the same commit"),
        (["--good", "HEAD", "--bad", "HEAD~1", "--command", "true"], "not an ancestor"),
        (["--good", "HEAD~1", "--bad", "HEAD", "--shape", "smoke", "--command", "true"],
         "not both"),
        (["--good", "HEAD~1", "--bad", "HEAD"], "nothing to measure"),
        (["--good", "HEAD~1", "--bad", "HEAD", "--shape", "nope", "--method", "x"], "nope"),
        (["--good", "HEAD~1", "--bad", "HEAD", "--alpha", "2", "--command", "true"], "--alpha"),
        (["--good", "HEAD~1", "--bad", "HEAD", "--command", " "], "--command is empty"),
        (["--good", "HEAD~1", "--bad", "HEAD", "--command", "sleep 5", "--timeout", "0.2"],
         "ran over --timeout 0.2 s"),
        (["--good", "HEAD~1", "--bad", "HEAD", "--command", "exit 3"],
         "cannot be measured: --command exited 3"),
        # Issue 30: the cut tail of the inner run's error never said "unknown method"; the
        # good commit's own run names it (a method may exist at some commits only).
        (["--good", "HEAD~1", "--bad", "HEAD", "--shape", "smoke", "--method", "nope"],
         "cannot be measured: perfsuite run exited 2: --methods: unknown method(s) nope; known: "),
    ],
)  # fmt: skip
def test_bad_input_one_line_exit_2(
    made_repo: tuple[Path, list[str]],
    tmp_path: Path,
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Refused before anything is measured or made, or after it is undone: the module's
    repository is left as it was (no worktree), for the next test to use."""
    path, _ = made_repo
    (tmp_path / "plain").mkdir()
    argv = [a.format(plain=tmp_path / "plain") for a in argv]
    if "--repo" not in argv:
        argv = ["--repo", str(path), *argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert git(path, "worktree", "list").count("\n") == 0


TINY_PLUGIN = '''"""eager with a sleep of DELAY seconds per call: a planted slowdown for bisect."""
import time

from perfsuite.baselines.torch_methods import eager_loss
from perfsuite.method import Capabilities, SimpleMethod

DELAY = {delay}


def _make(case, c):
    def loss_fn(e, c, t):
        if DELAY:
            time.sleep(DELAY)
        return eager_loss(e, c, t, case.beta, case.softcap)

    return loss_fn


METHODS = [SimpleMethod("tiny", "eager, maybe slowed", _make, caps=Capabilities())]
'''


@pytest.mark.slow
def test_bisects_a_perfsuite_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The --shape/--method path: `perfsuite run` of a plugin method in each commit's
    checkout (4 runs of about 20 s on a 2-core CPU, hence slow)."""
    path = new_repo(tmp_path / "repo")
    shas = [
        commit(path, "tiny method", **{"tinyplugin.py": TINY_PLUGIN.format(delay=0.0)}),
        commit(path, "docs", README="tiny\n"),
        commit(path, "slow: sleep", **{"tinyplugin.py": TINY_PLUGIN.format(delay=0.05)}),
        commit(path, "docs again", README="tiny, again\n"),
    ]
    monkeypatch.setenv("PERFSUITE_PLUGINS", "tinyplugin")
    argv = ["--repo", str(path), "--good", shas[0], "--bad", shas[3], "--shape", "smoke"]
    argv += ["--method", "tiny", "--phase", "fwd", "--device", "cpu", "--samples", "8"]
    assert main(argv) == 0
    assert f"first slow commit: {shas[2]} slow: sleep" in capsys.readouterr().out
