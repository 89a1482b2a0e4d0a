"""One training run of a method, beta and dtype, from the preset's seed on the same batches
(runs differ only in their loss); a failure is the run's status and reason, never raised."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch.nn.utils import parameters_to_vector

from perfsuite.converge.data import Dataset
from perfsuite.converge.evaluate import evaluate
from perfsuite.converge.model import build_model, hooked_loss
from perfsuite.converge.presets import Preset
from perfsuite.harness.worker import failure
from perfsuite.method import DTYPES, Case, SimpleMethod

ADAM = {"betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.0}


@dataclass
class RunResult:
    """What one run produced; ``params`` (final weights, flat fp32) stays out of the JSON."""

    method: str
    beta: float
    dtype: str
    status: str = "ok"
    reason: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    heldout: dict[str, Any] | None = None
    wall_s: float = 0.0
    parity: dict[str, Any] | None = None
    params: torch.Tensor | None = None
    busy: str = ""  # why the machine was busy while it trained ("" when quiet)

    @property
    def losses(self) -> list[float]:
        return [s["loss"] for s in self.steps]

    def to_dict(self) -> dict[str, Any]:
        """Every field but the weights: a worker's line, the run's results row."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "params"}


def memory_meter(device: str) -> tuple[str, Callable[[Callable[[], Any]], int | None]]:
    """``(name, measure)``: ``measure(fn)`` runs ``fn`` and returns its peak bytes above
    its start, by measure.memory's meters: on CPU without its tensor profiler, which would
    slow the timed step; on either device without a collection first (~170 ms a step with
    transformers on CPU; on CUDA an emptied cache would put allocations in the step's time)."""
    from perfsuite.measure.memory import cpu_meter_supported, measure_cuda_peak, measure_rss_peak

    if device == "cuda":
        return "cuda max_memory_allocated above the step's start (bytes)", (
            lambda fn: measure_cuda_peak(fn, torch.device("cuda"), collect=False).delta
        )
    if cpu_meter_supported() is None:
        return "process RSS growth at its peak during the step (VmHWM - VmRSS, bytes)", (
            lambda fn: measure_rss_peak(fn, collect=False).delta
        )
    return "none (no /proc/self/clear_refs here)", lambda fn: fn()  # a step returns None


def train_run(
    method: SimpleMethod,
    preset: Preset,
    data: Dataset,
    beta: float,
    dtype: str,
    device: str,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> RunResult:
    """Train from scratch with ``method``'s loss; never raises for a method's failure
    (the parent refused a run the method cannot make: ``Kind.decided``)."""
    result = RunResult(method=method.name, beta=beta, dtype=dtype)
    start = time.perf_counter()
    size = (preset.tokens_per_step, preset.vocab, preset.hidden)
    case = Case(*size, dtype=dtype, beta=beta, device=device, z_loss=preset.z_loss)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    try:
        model = build_model(preset, DTYPES[dtype], device)
        loss_fn = method.prepare(case, model.lm_head.weight)
        optimizer = torch.optim.AdamW(model.parameters(), lr=preset.lr, foreach=False, **ADAM)
        _, measure = memory_meter(device)
        for step, batch in enumerate(data.batches()):
            batch = batch.to(device)
            record: dict[str, Any] = {"step": step}

            def one_step(batch: torch.Tensor = batch, record: dict[str, Any] = record) -> None:
                sync()
                t0 = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                loss = hooked_loss(model, loss_fn, batch[:, :-1], batch[:, 1:])
                loss.backward()
                # every parameter's gradient together, in fp32
                norms = [p.grad.float().norm() for p in model.parameters() if p.grad is not None]
                record["grad_norm"] = float(torch.linalg.vector_norm(torch.stack(norms)))
                optimizer.step()
                sync()
                record["time_s"] = time.perf_counter() - t0
                record["loss"] = float(loss.detach())

            record["peak_bytes"] = measure(one_step)
            result.steps.append(record)
            if on_step is not None:
                on_step(record)
            if not math.isfinite(record["loss"]):
                result.status = "diverged"
                result.reason = f"non-finite loss {record['loss']} at step {step}"
                break
        else:  # every parameter, fp32, on CPU, in one vector (for distances between runs)
            result.params = parameters_to_vector(model.parameters()).detach().float().cpu()
            result.heldout = evaluate(model, data.heldout, data.source, device)
    except Exception as err:  # a method's crash is its row's, not the sweep's (as in run)
        result.status, result.reason = failure(err)
    result.wall_s = round(time.perf_counter() - start, 4)
    return result
