"""``perfsuite bisect --good REV --bad REV``: ``git bisect run`` in a temporary worktree (the
user's checkout is never touched), each step judged by ``compare``'s time rule (``run_step``)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from perfsuite.args import level, non_negative_int, positive_float, positive_int
from perfsuite.measure.stats import summarize
from perfsuite.plan.shapes import get_shape
from perfsuite.regress.compare import parse_fraction
from perfsuite.regress.verdicts import (
    DEFAULT_ALPHA,
    DEFAULT_TIME_THRESHOLDS,
    Decision,
    Settings,
    compare_time,
)
from perfsuite.results.results import PHASES

GOOD, BAD, SKIP, ABORT = 0, 1, 125, 128


class MeasureError(RuntimeError):
    """This commit cannot be measured (one line: why)."""


@dataclass
class Spec:
    """What to measure and how to judge it; written once, read by every step."""

    samples: int
    warmup: int
    threshold: float | None  # None: compare's default for the device kind
    alpha: float
    scratch: str  # folder for each commit's results file and the step log
    command: str | None = None
    shape: str | None = None
    method: str | None = None
    phase: str = "fwd+bwd"
    beta: float = 0.0
    device: str = "auto"
    timeout: float = 3600.0
    good_samples: tuple[float, ...] = ()
    device_kind: str = "cpu"


def _said(proc: subprocess.CompletedProcess[str]) -> str:
    """The last line a process printed: on stderr, else on stdout ("" if none)."""
    lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    return lines[-1].strip() if lines else ""


def time_command(spec: Spec, cwd: Path) -> list[float]:
    """Wall time (ms) of ``spec.command`` run by the shell in ``cwd``, after the warm-up runs."""
    assert spec.command is not None
    samples = []
    for _ in range(spec.warmup + spec.samples):
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                spec.command, shell=True, cwd=cwd, capture_output=True, text=True,
                timeout=spec.timeout,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise MeasureError(f"--command ran over --timeout {spec.timeout:g} s") from None
        samples.append((time.perf_counter() - start) * 1e3)
        if proc.returncode != 0:
            why = _said(proc)
            raise MeasureError(f"--command exited {proc.returncode}" + (f": {why}" if why else ""))
    return samples[spec.warmup :]  # the warm-up runs are not timed


def run_cell(spec: Spec, cwd: Path, out: Path) -> tuple[list[float], str]:
    """The samples of one ``perfsuite run`` cell at this commit, and the device kind."""
    argv = [
        sys.executable, "-m", "perfsuite", "run", "--shape", str(spec.shape),
        "--methods", str(spec.method), "--phases", spec.phase, "--beta", f"{spec.beta:g}",
        "--samples", str(spec.samples), "--warmup", str(spec.warmup), "--device", spec.device,
        "--timeout", f"{spec.timeout:g}", "--out", str(out), "--force",
    ]  # fmt: skip
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(cwd), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if not out.exists():
        why = _said(proc).removeprefix("error: ")
        raise MeasureError(f"perfsuite run exited {proc.returncode}: {why}")
    document = json.loads(out.read_text())
    cell = (spec.method, spec.phase, None)  # run without --tp: one device, never a TP cell
    rows = document.get("rows", [])
    row = next((r for r in rows if (r.get("method"), r.get("phase"), r.get("tp")) == cell), None)
    if row is None:
        raise MeasureError(f"perfsuite run measured no {spec.method} {spec.phase} cell")
    if row.get("status") != "ok" or not row.get("samples_ms"):
        why = f"{row.get('status')} {row.get('reason', '')}"
        raise MeasureError(f"{spec.method} {spec.phase}: {why}")
    kind = ((document.get("env") or {}).get("device") or {}).get("kind") or "cpu"
    return [float(s) for s in row["samples_ms"]], kind


def measure(spec: Spec, cwd: Path, label: str) -> tuple[list[float], str]:
    """Samples (ms) of the commit checked out in ``cwd``; ``MeasureError`` if none."""
    if spec.command is not None:
        return time_command(spec, cwd), spec.device_kind
    return run_cell(spec, cwd, Path(spec.scratch) / f"run-{label}.json")


@dataclass
class Judgement(Decision):
    """A commit's time verdict (``skip``: unmeasurable) and median."""

    sha: str = ""
    median: float | None = None


def judge(spec: Spec, samples: Sequence[float], kind: str, sha: str) -> Judgement:
    """``compare``'s time verdict of these samples against the good commit's."""
    settings = Settings(time_threshold=spec.threshold, alpha=spec.alpha)
    decision = compare_time(list(spec.good_samples), list(samples), settings, device=kind)
    judged = asdict(decision) | {"verdict": decision.verdict or "same"}
    return Judgement(**judged, sha=sha, median=summarize(samples, "median"))


def read_log(scratch: str | os.PathLike[str]) -> list[Judgement]:
    path = Path(scratch) / "steps.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [Judgement(**json.loads(line)) for line in lines if line]


def run_step(spec_path: str) -> int:
    """Measure and judge HEAD of the current directory; git bisect's exit code."""
    try:
        spec = Spec(**json.loads(Path(spec_path).read_text()))
        cwd = Path.cwd()
        sha = git(cwd, "rev-parse", "HEAD").stdout.strip()
        try:
            judgement = judge(spec, *measure(spec, cwd, sha[:12]), sha)
        except MeasureError as err:
            judgement = Judgement("skip", note=str(err), sha=sha)
        with open(Path(spec.scratch) / "steps.jsonl", "a") as f:
            f.write(json.dumps(asdict(judgement)) + "\n")
        return {"skip": SKIP, "regression": BAD}.get(judgement.verdict, GOOD)
    except Exception as err:  # anything else stops the bisection instead of blaming a commit
        print(f"perfsuite bisect step failed: {type(err).__name__}: {err}", file=sys.stderr)
        return ABORT


class BisectError(ValueError):
    """Bad input or a git failure (one line, exit code 2)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--good", required=True, metavar="REV", help="a commit that was fast")
    p.add_argument("--bad", required=True, metavar="REV", help="a later commit that is slow")
    p.add_argument("--repo", default=".", metavar="DIR", help="the git repository (default: .)")
    what = p.add_argument_group("what to measure: one perfsuite cell, or a command").add_argument
    what("--shape", help="shape preset of the cell")
    what("--method", help="method of the cell")
    what("--phase", default="fwd+bwd", choices=PHASES)
    what("--beta", type=float, default=0.0, help="label smoothing (default 0)")
    what("--device", default="auto", choices=["auto", "cuda", "cpu"])
    what("--command", metavar="CMD", help="time this shell command instead (wall time, per run)")
    p.add_argument("--samples", type=positive_int, help="per commit (default 20; --command 10)")
    first = "untimed runs first (default 3; --command 1)"
    p.add_argument("--warmup", type=non_negative_int, help=first)
    slower = "smallest slowdown that counts (default compare's: 2%% CUDA, 20%% CPU and --command)"
    p.add_argument("--threshold", type=parse_fraction, help=slower)
    p.add_argument("--alpha", type=level, default=DEFAULT_ALPHA, help="U test level (0.01)")
    p.add_argument("--timeout", type=positive_float, default=3600.0, help="seconds per measurement")


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError:
        raise BisectError("git is not installed") from None
    if check and proc.returncode != 0:
        raise BisectError(f"git {args[0]}: {_said(proc) or f'exit {proc.returncode}'}")
    return proc


def commit(top: Path, rev: str, option: str) -> str:
    proc = git(top, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if proc.returncode != 0 or not rev.strip():
        raise BisectError(f"{option} {rev}: not a commit in {top}")
    return proc.stdout.strip()


# ``Spec``'s fields taken as the options give them.
ASKED = ("alpha", "command", "shape", "method", "phase", "beta", "device", "timeout")


def spec_from(args: argparse.Namespace) -> Spec:
    """The measurement the arguments ask for; ``BisectError`` if they ask for none or two."""
    command = args.command is not None
    if command and (args.shape is not None or args.method is not None):
        raise BisectError("give --shape and --method (a perfsuite cell) or --command, not both")
    if command and not args.command.strip():
        raise BisectError("--command is empty")
    if not command and (args.shape is None or args.method is None):
        raise BisectError("nothing to measure: give --shape and --method, or --command")
    if not command:
        get_shape(args.shape)  # an unknown preset is a one-line ValueError
    cpu = DEFAULT_TIME_THRESHOLDS["cpu"]  # --command: a process' wall time, as noisy as CPU's
    # The method is the checkout's to know (a plugin of the bisected repository, a method
    # added at some commits): the good commit's run refuses one it lacks.
    return Spec(
        samples=args.samples or (10 if command else 20),
        warmup=(1 if command else 3) if args.warmup is None else args.warmup,
        threshold=cpu if command and args.threshold is None else args.threshold,
        scratch="",
        **{name: getattr(args, name) for name in ASKED},
    )


def _describe(j: Judgement) -> str:
    if j.verdict == "skip":
        return f"skipped: {j.note}"
    p = "" if j.p_slower is None else f", p={j.p_slower:.2g}"
    note = f"; {j.note}" if j.note else ""
    return f"median {j.median:.4g} ms, {j.ratio:.3f}x the good commit{p}: {j.verdict}{note}"


def _subject(top: Path, sha: str) -> str:
    return git(top, "log", "-1", "--format=%s", sha).stdout.strip()


def bisect(spec: Spec, top: Path, tree: Path, good: str, bad: str) -> int:
    """Measure, check that bad is slower, run ``git bisect run`` in ``tree``; the exit code."""
    scratch, measured = Path(spec.scratch), []
    for label, rev in (("good", good), ("bad", bad)):
        git(tree, "checkout", "--detach", "--quiet", rev)
        try:
            measured.append(measure(spec, tree, label))
        except MeasureError as err:
            raise BisectError(f"{label} commit {rev[:10]} cannot be measured: {err}") from None
    (samples, kind), (bad_samples, _) = measured
    spec.good_samples, spec.device_kind = tuple(samples), kind
    verdict = judge(spec, bad_samples, kind, bad)
    median = summarize(samples, "median")
    print(f"good {good[:10]}: median {median:.4g} ms ({len(samples)} samples)")
    print(f"bad  {bad[:10]}: {_describe(verdict)}")
    if verdict.verdict != "regression":
        print("the bad commit is not slower by compare's rule: nothing to bisect")
        return 1
    spec_path, script = scratch / "spec.json", scratch / "step.py"
    spec_path.write_text(json.dumps(asdict(spec)))
    # The step runs with this perfsuite, whatever the commit checked out.
    root = Path(__file__).resolve().parents[2]
    script.write_text(
        f"import sys\nsys.path.insert(0, {str(root)!r})\n"
        f"from perfsuite.regress.bisect import run_step\nsys.exit(run_step({str(spec_path)!r}))\n"
    )
    git(tree, "bisect", "start", bad, good)
    proc = git(tree, "bisect", "run", sys.executable, str(script), check=False)
    for step in read_log(scratch):
        print(f"     {step.sha[:10]}: {_describe(step)}  ({_subject(top, step.sha)})")
    if proc.returncode == 0 and "is the first bad commit" in proc.stdout:
        culprit = git(tree, "rev-parse", "refs/bisect/bad").stdout.strip()
        print(f"first slow commit: {culprit} {_subject(top, culprit)}")
        return 0
    if "only 'skip'ped commits left" in proc.stdout:
        print("no answer: the commits left could not be measured (see the skips above)")
        return 1
    lines = (proc.stderr + proc.stdout).strip().splitlines()
    raise BisectError(f"git bisect run failed: {lines[-1] if lines else proc.returncode}")


def run(args: argparse.Namespace) -> int:
    """``perfsuite bisect``; returns the exit code (bad input raises ``BisectError``)."""
    if not Path(args.repo).is_dir():
        raise BisectError(f"--repo {args.repo}: not a folder")
    proc = git(Path(args.repo), "rev-parse", "--show-toplevel", check=False)
    if proc.returncode != 0:
        raise BisectError(f"--repo {args.repo}: not inside a git repository")
    top = Path(proc.stdout.strip())  # the top of the work tree holding --repo
    good, bad = commit(top, args.good, "--good"), commit(top, args.bad, "--bad")
    if good == bad:
        raise BisectError("--good and --bad are the same commit")
    if git(top, "merge-base", "--is-ancestor", good, bad, check=False).returncode != 0:
        raise BisectError(f"--good {args.good} is not an ancestor of --bad {args.bad}")
    spec = spec_from(args)
    if git(top, "status", "--porcelain", "--untracked-files=no").stdout.strip():
        print(f"note: uncommitted changes in {top} are left alone and not measured")
    with tempfile.TemporaryDirectory(prefix="perfsuite-bisect-", ignore_cleanup_errors=True) as tmp:
        spec.scratch, tree = tmp, Path(tmp) / "worktree"
        git(top, "worktree", "add", "--detach", "--quiet", str(tree), good)
        try:
            return bisect(spec, top, tree, good, bad)
        finally:
            git(tree, "bisect", "reset", "--quiet", check=False)
            git(top, "worktree", "remove", "--force", str(tree), check=False)
            git(top, "worktree", "prune", check=False)
