"""Runs the converge cells: one fresh worker process per method, results as they land.

The house pattern of ``perfsuite run`` (``perfsuite.run.runner``): a method's
crash, OOM kill or hang stays in its worker. A worker that dies costs the run it
was on (recorded as ``oom`` or ``error`` with the reason and the steps it had
finished); a new worker takes the method's remaining runs. Cells the parent can
decide alone (the method is unavailable on the device, or cannot smooth at
beta > 0) are recorded without a worker, and never trained at another beta.

Natively timed methods run one at a time (eager first, so every verdict printed
is final); Triton methods on a CPU run under the interpreter, whose step times
mean nothing, ``jobs`` workers at a time, each with a share of the cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from perfsuite.converge.presets import Preset
from perfsuite.converge.train import RunResult
from perfsuite.converge.worker import WorkerSpec
from perfsuite.method import Case, Method
from perfsuite.run.runner import (
    CANCEL,
    Cancelled,
    child_env,
    death_reason,
    read_json_lines,
    run_parallel,
)

POLL_S = 0.5


@dataclass(frozen=True)
class Cell:
    """One run to make: a method at a beta in a dtype."""

    method: str
    beta: float
    dtype: str


@dataclass
class Job:
    """What every worker of a sweep shares."""

    preset: Preset
    data: str
    device: str
    jobs: int
    timeout_s: float
    workdir: Path
    # Called with a worker's description of the model (the first one to arrive).
    on_model: Callable[[dict[str, Any]], None] | None = None


def decided(method: Method, cell: Cell, preset: Preset, device: str) -> RunResult | None:
    """An ``unavailable``/``unsupported`` result when no worker is needed to know, else None."""
    reason = method.availability(device)
    status = "unavailable"
    if reason is None:
        case = Case(
            tokens=preset.tokens_per_step,
            vocab=preset.vocab,
            hidden=preset.hidden,
            dtype=cell.dtype,
            beta=cell.beta,
            device=device,
            z_loss=preset.z_loss,
        )
        status, reason = "unsupported", method.unsupported_reason(case)
    if reason is None:
        return None
    return RunResult(cell.method, cell.beta, cell.dtype, status=status, reason=reason)


def interpreted(method: Method, device: str) -> bool:
    return device == "cpu" and method.caps.triton


def _finished(lines: list[dict[str, Any]], skip: int) -> list[RunResult]:
    """The runs a worker reported as done after the first ``skip``, with their weights
    (loaded, then deleted: the parent holds them from here on)."""
    out = []
    for line in [ln for ln in lines if "result" in ln][skip:]:
        params = None
        if line.get("params"):
            params = torch.load(line["params"], weights_only=True)
            Path(line["params"]).unlink()
        out.append(RunResult.from_dict(line["result"], params))
    return out


def run_method(
    method: Method, cells: list[Cell], job: Job, on_result: Callable[[RunResult], None]
) -> None:
    """Train ``cells`` (all of one method) in workers, restarting after a death."""
    remaining = list(cells)
    attempt = 0
    while remaining:
        attempt += 1
        out = job.workdir / f"{method.name}-{attempt}.jsonl"
        spec = WorkerSpec(
            method=method.name,
            runs=[{"beta": c.beta, "dtype": c.dtype} for c in remaining],
            preset=job.preset.to_dict(),
            data=job.data,
            device=job.device,
            out=str(out),
            params_dir=str(job.workdir),
        )
        spec_path = job.workdir / f"{method.name}-{attempt}.json"
        spec_path.write_text(json.dumps(asdict(spec)))
        stderr_path = job.workdir / f"{method.name}-{attempt}.stderr"
        with open(stderr_path, "w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "perfsuite.converge.worker", str(spec_path)],
                env=child_env(job.device, job.jobs, method.caps.triton),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
            reported, timed_out = _watch(proc, out, remaining, job, on_result)
        if reported >= len(remaining):
            return
        # The run in flight died with the worker: record why and its steps, go on.
        lines = read_json_lines(out)
        status, reason = death_reason(proc.returncode, timed_out, stderr_path.read_text())
        lost = remaining[reported]
        steps = [ln["step"] for ln in lines if ln.get("run") == reported and "step" in ln]
        on_result(
            RunResult(lost.method, lost.beta, lost.dtype, status=status, reason=reason, steps=steps)
        )
        remaining = remaining[reported + 1 :]


def _watch(
    proc: subprocess.Popen,
    out: Path,
    cells: list[Cell],
    job: Job,
    on_result: Callable[[RunResult], None],
) -> tuple[int, float | None]:
    """Wait for ``proc``, passing each finished run on; kill it past the per-run limit."""
    reported = 0
    started = time.monotonic()
    while True:
        try:
            proc.wait(timeout=POLL_S)
            done = True
        except subprocess.TimeoutExpired:
            done = False
        lines = read_json_lines(out)
        if job.on_model is not None and lines and "model" in lines[0]:
            job.on_model(lines[0]["model"])
        for result in _finished(lines, reported):
            on_result(result)
            reported += 1
            started = time.monotonic()
        if done:
            return reported, None
        if CANCEL.is_set():  # the sweep was interrupted in another thread
            proc.kill()
            proc.wait()
            raise Cancelled(cells[0].method)
        if time.monotonic() - started > job.timeout_s:
            proc.kill()
            proc.wait()
            return reported, job.timeout_s


def run_cells(
    methods: dict[str, Method],
    cells: list[Cell],
    job: Job,
    on_result: Callable[[RunResult], None],
) -> None:
    """Every cell: decided ones at once, then native methods one by one in the order
    given, then interpreted ones ``job.jobs`` at a time."""
    by_method: dict[str, list[Cell]] = {}
    for cell in cells:
        result = decided(methods[cell.method], cell, job.preset, job.device)
        if result is not None:
            on_result(result)
        else:
            by_method.setdefault(cell.method, []).append(cell)
    native = [m for m in by_method if not interpreted(methods[m], job.device)]
    emulated = [m for m in by_method if interpreted(methods[m], job.device)]
    emulated.sort(key=lambda m: -methods[m].caps.interpreter_cost)  # longest first

    def work(name: str) -> None:
        run_method(methods[name], by_method[name], job, on_result)

    for name in native:
        work(name)
    if job.jobs <= 1 or len(emulated) <= 1:
        for name in emulated:
            work(name)
    else:
        run_parallel(emulated, work, job.jobs)


def workdir() -> tempfile.TemporaryDirectory:
    """Scratch space for specs, worker lines and saved weights (removed at the end)."""
    return tempfile.TemporaryDirectory(prefix="perfsuite-converge-")
