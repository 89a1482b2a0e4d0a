"""The measuring half of ``perfsuite sensitivity``: each fresh worker's calibration of the
injected slowdowns or measurement of the cell, and the parent collecting their samples."""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from perfsuite.harness.environment import child_env
from perfsuite.harness.lifecycle import python_worker, read_json_lines, run_worker
from perfsuite.harness.scratch import scratch
from perfsuite.harness.worker import Served
from perfsuite.measure.stats import quantile, summarize

UNCHANGED = 0.0


@dataclass
class HarnessConfig:
    """The cell measured and how much of it (defaults: the README's numbers)."""

    method: str = "eager"
    tokens: int = 256
    vocab: int = 4096
    hidden: int = 256
    dtype: str = "fp32"
    beta: float = 0.0
    phase: str = "fwd+bwd"
    slowdowns: tuple[float, ...] = (0.05, 0.10)
    processes: int = 5
    runs: int = 16  # rounds per process; each round times every condition once
    samples: int = 20
    warmup: int = 3
    calibration_rounds: int = 6
    seed: int = 0
    flush: bool = True  # the suite's cache flush between samples
    threads: int | None = None  # torch intra-op threads; None: torch's default, as the suite
    device: str = "cpu"


QUICK = HarnessConfig(tokens=64, vocab=1024, hidden=64, processes=2, runs=3, samples=10,
                      warmup=1, calibration_rounds=2, flush=False)  # fmt: skip


def slowed(loss_fn: Callable, extra_tokens: int) -> Callable:
    """``loss_fn`` plus ``0 *`` its loss on the first ``extra_tokens`` tokens: the same kernels on
    a slice of the work proportional to them (``c`` detached: no fixed V x D gradient term)."""
    if extra_tokens <= 0:
        return loss_fn

    def loss(e: Any, c: Any, targets: Any) -> Any:
        k = extra_tokens
        return loss_fn(e, c, targets) + 0.0 * loss_fn(e[:k], c.detach(), targets[:k])

    return loss


def _timer(cfg: HarnessConfig) -> Callable[[int, int, int], list[float]]:
    """The cell's timer: (extra tokens, samples, warm-up runs) -> samples (ms)."""
    import torch

    from perfsuite.harness.worker import Phase
    from perfsuite.measure.timing import CacheFlusher, time_samples
    from perfsuite.method import Case
    from perfsuite.plan.registry import get_method
    from perfsuite.run.inputs import make_inputs

    device = torch.device(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    case = Case(cfg.tokens, cfg.vocab, cfg.hidden, cfg.dtype, cfg.beta, None, cfg.device)
    inputs = make_inputs(case, cfg.seed)
    loss_fn = get_method(cfg.method).prepare(case, inputs.c)
    flush = CacheFlusher(device) if cfg.flush else (lambda: None)

    def timed(extra_tokens: int, samples: int, warmup: int) -> list[float]:
        phase = Phase(cfg.phase, slowed(loss_fn, extra_tokens), inputs)
        timing = time_samples(
            phase.body, device, samples=samples, warmup=warmup, setup=phase.setup, flush=flush
        )
        phase.reset()
        return timing.samples_ms

    return timed


def _ratio(timed: Callable[[int, int, int], list[float]], k: int, rounds: int, n: int) -> float:
    """Measured slowdown of ``k`` extra tokens: median over interleaved rounds."""
    medians = [[summarize(timed(x, n, 1), "median") for x in (0, k)] for _ in range(rounds)]
    return quantile([slow / base - 1 for base, slow in medians], 0.5)


def calibrate(cfg: HarnessConfig) -> dict[str, Any]:
    """Extra tokens per slowdown: a proportional guess, then two secant steps."""
    timed = _timer(cfg)
    timed(0, 3, cfg.warmup)
    samples = max(5, cfg.samples // 2)
    out: dict[str, Any] = {}
    for target in cfg.slowdowns:
        points: list[tuple[int, float]] = []
        k = max(1, round(target * cfg.tokens))
        for _ in range(3):
            r = _ratio(timed, k, cfg.calibration_rounds, samples)
            points.append((k, r))
            if len(points) == 1:
                new_k = k * target / r if r > 0 else 2 * k
            else:
                (k0, r0), (k1, r1) = points[-2], points[-1]
                slope = (r1 - r0) / (k1 - k0) if k1 != k0 and r1 != r0 else r1 / k1
                new_k = k1 + (target - r1) / slope if slope > 0 else k1
            k = int(min(max(1, round(new_k)), cfg.tokens))
        out[f"{target:g}"] = {"extra_tokens": k, "steps": points}
    return out


def measure(cfg: HarnessConfig, extra: dict[str, int], proc: int) -> dict[str, list[list[float]]]:
    """``runs`` rounds, each timing every condition once in a shuffled order."""
    timed = _timer(cfg)
    timed(0, 3, cfg.warmup)
    rng = random.Random(cfg.seed * 1000 + proc)
    runs: dict[str, list[list[float]]] = {f"{c:g}": [] for c in (UNCHANGED, *cfg.slowdowns)}
    for _ in range(cfg.runs):
        for cond in rng.sample(list(runs), len(runs)):
            runs[cond].append(timed(extra.get(cond, 0), cfg.samples, cfg.warmup))
    return runs


@dataclass
class WorkerSpec:
    """A worker's job: ``calibrate``, or ``measure`` as process ``proc``; one case: the config."""

    mode: str
    config: dict[str, Any]
    out: str
    extra: dict[str, int] | None = None
    proc: int = 0

    @property
    def cases(self) -> list[dict[str, Any]]:
        return [self.config]


def run_case(
    spec: WorkerSpec, state: None, index: int, raw: dict[str, Any], emit: Any, stage: Any
) -> None:
    cfg = HarnessConfig(**{**raw, "slowdowns": tuple(raw["slowdowns"])})
    calibrating = spec.mode == "calibrate"
    emit({"result": calibrate(cfg) if calibrating else measure(cfg, spec.extra or {}, spec.proc)})


WORKER = Served(WorkerSpec, run_case)


def _spawn(spec: dict[str, Any], tmp: Path, name: str) -> Any:
    """One ``WORKER`` through the harness's worker life; its ``result`` line is its result."""
    out, path = tmp / f"{name}.out.jsonl", tmp / f"{name}.spec.json"
    path.write_text(json.dumps({**spec, "out": str(out)}))
    command = python_worker("perfsuite.regress.sensitivity_collect", str(path))
    env = child_env(spec["config"]["device"], jobs=1, triton=False, busy=False)
    ended = run_worker(command, env, out, math.inf, lambda lines: False)
    results = [line["result"] for line in read_json_lines(out) if "result" in line]
    if ended.returncode != 0 or not results:
        why = ended.death_reason()[1]
        raise RuntimeError(f"sensitivity worker {name}: {why}")
    return results[0]


def collect(cfg: HarnessConfig, log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Calibrate, then measure in ``cfg.processes`` fresh processes, one after the other."""
    from perfsuite.plan.registry import get_method
    from perfsuite.results.provenance import collect_env

    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    env = collect_env(cfg.device, get_method(cfg.method).distributions)
    with scratch() as tmp:
        log("calibrating the injected slowdowns")
        calibration = _spawn({"mode": "calibrate", "config": asdict(cfg)}, Path(tmp), "cal")
        extra = {name: c["extra_tokens"] for name, c in calibration.items()}
        processes = []
        for proc in range(cfg.processes):
            log(f"process {proc + 1}/{cfg.processes}: {cfg.runs} rounds")
            spec = {"mode": "measure", "config": asdict(cfg), "extra": extra, "proc": proc}
            processes.append(_spawn(spec, Path(tmp), f"p{proc}"))
    return {
        "config": asdict(cfg),
        "env": env,
        "calibration": calibration,
        "extra_tokens": extra,
        "processes": processes,  # [proc][condition] -> [run] -> samples_ms
        "collect_s": time.perf_counter() - started,
        "load": {"before": load_before, "after": os.getloadavg()[0], "cores": os.cpu_count()},
    }
