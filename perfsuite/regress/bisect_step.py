"""One step of ``perfsuite bisect``: measure the checked-out commit, judge it against the good one.

``git bisect run`` calls it through a launcher that imports *this* perfsuite, never the
commit's; ``run_cell`` runs the commit's own ``perfsuite run``. The verdict is ``compare``'s
time rule. Exit codes are git's: 0 good, 1 slower, 125 skip (unmeasurable), 128 abort."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from perfsuite.regress.verdicts import Settings, compare_time

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

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Spec:
        return cls(**json.loads(Path(path).read_text()))


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def time_command(spec: Spec, cwd: Path) -> list[float]:
    """Wall time (ms) of ``spec.command`` run by the shell in ``cwd``, after the warm-up runs."""
    assert spec.command is not None
    samples = []
    for i in range(spec.warmup + spec.samples):
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                spec.command, shell=True, cwd=cwd, capture_output=True, text=True,
                timeout=spec.timeout,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise MeasureError(f"--command ran over --timeout {spec.timeout:g} s") from None
        elapsed = (time.perf_counter() - start) * 1e3
        if proc.returncode != 0:
            why = _last_line(proc.stderr) or _last_line(proc.stdout)
            raise MeasureError(f"--command exited {proc.returncode}" + (f": {why}" if why else ""))
        if i >= spec.warmup:
            samples.append(elapsed)
    return samples


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
        why = _last_line(proc.stderr) or _last_line(proc.stdout)
        raise MeasureError(f"perfsuite run exited {proc.returncode}: {why}")
    document = json.loads(out.read_text())
    rows = [
        r
        for r in document.get("rows", [])
        if r.get("method") == spec.method
        and r.get("phase") == spec.phase
        and abs(float(r.get("beta", -1)) - spec.beta) < 1e-12
        and r.get("tp") is None  # run without --tp: one device, never a TP cell
    ]
    if not rows:
        raise MeasureError(f"perfsuite run measured no {spec.method} {spec.phase} cell")
    row = rows[0]
    if row.get("status") != "ok" or not row.get("samples_ms"):
        raise MeasureError(
            f"{spec.method} {spec.phase}: {row.get('status')} {row.get('reason', '')}"
        )
    kind = ((document.get("env") or {}).get("device") or {}).get("kind") or "cpu"
    return [float(s) for s in row["samples_ms"]], kind


def measure(spec: Spec, cwd: Path, label: str) -> tuple[list[float], str]:
    """Samples (ms) of the commit checked out in ``cwd``; ``MeasureError`` if none."""
    if spec.command is not None:
        return time_command(spec, cwd), spec.device_kind
    return run_cell(spec, cwd, Path(spec.scratch) / f"run-{label}.json")


@dataclass(frozen=True)
class Judgement:
    sha: str
    verdict: str  # regression | same | improvement | skip
    median: float | None = None
    ratio: float | None = None
    p_slower: float | None = None
    note: str = ""


def judge(spec: Spec, samples: Sequence[float], kind: str, sha: str) -> Judgement:
    """``compare``'s time verdict of these samples against the good commit's."""
    settings = Settings(time_threshold=spec.threshold, alpha=spec.alpha)
    decision = compare_time(list(spec.good_samples), list(samples), settings, device=kind)
    from perfsuite.measure.stats import summarize

    return Judgement(
        sha=sha,
        verdict=decision.verdict or "same",
        median=summarize(list(samples), "median"),
        ratio=decision.ratio,
        p_slower=decision.p_slower,
        note=decision.note,
    )


def log(spec: Spec, judgement: Judgement) -> None:
    with open(Path(spec.scratch) / "steps.jsonl", "a") as f:
        f.write(json.dumps(asdict(judgement)) + "\n")


def read_log(scratch: str | os.PathLike[str]) -> list[Judgement]:
    path = Path(scratch) / "steps.jsonl"
    if not path.exists():
        return []
    return [Judgement(**json.loads(line)) for line in path.read_text().splitlines() if line]


def run_step(spec_path: str) -> int:
    """Measure and judge HEAD of the current directory; git bisect's exit code."""
    try:
        spec = Spec.load(spec_path)
        cwd = Path.cwd()
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        try:
            samples, kind = measure(spec, cwd, sha[:12])
        except MeasureError as err:
            log(spec, Judgement(sha, "skip", note=str(err)))
            return SKIP
        judgement = judge(spec, samples, kind, sha)
        log(spec, judgement)
        return BAD if judgement.verdict == "regression" else GOOD
    except Exception as err:  # anything else stops the bisection instead of blaming a commit
        print(f"perfsuite bisect step failed: {type(err).__name__}: {err}", file=sys.stderr)
        return ABORT


def launcher(spec_path: Path) -> str:
    """A script that runs ``run_step`` with this perfsuite, whatever the commit checked out."""
    root = Path(__file__).resolve().parents[2]
    return (
        "import sys\n"
        f"sys.path.insert(0, {str(root)!r})\n"
        "from perfsuite.regress.bisect_step import run_step\n"
        f"sys.exit(run_step({str(spec_path)!r}))\n"
    )
