"""One method's training steps, measured inside a fresh process.

The harness starts ``python -m perfsuite.step.worker SPEC.json``; per case
(model, dtype, β) this builds the model from its seed, computes the gate's references,
applies the method, runs the first step (gated, and timed once: compilation), one step
for memory, then the timed steps and the trivial loss's fwd+bwd, and appends a JSON
line per row to the spec's ``out`` file as soon as it is known (``{"start": i}`` marks
where case ``i`` began, ``{"model": ...}`` describes what was built), so that a crash
loses only the case in flight.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from perfsuite.measure.stats import quantile
from perfsuite.measure.timing import CacheFlusher
from perfsuite.method import Unavailable, Unsupported
from perfsuite.results.results import Row
from perfsuite.run.worker import INTERPRETER_BF16_NOTE, describe, is_oom, limit_memory
from perfsuite.step.cases import case_rows, case_size
from perfsuite.step.measure import Stepper, step_memory, time_fwd_bwd, time_steps
from perfsuite.step.methods import StepMethod, step_methods
from perfsuite.step.presets import get_preset

# AdamW at torch's defaults but a fine-tuning learning rate: the step's cost does not
# depend on it, and the weights stay sane over many timed steps.
LR = 1e-5
INTERPRETED_NOTE = "Triton interpreter on CPU: the loss's time says nothing about GPU speed"


@dataclass
class StepSpec:
    method: str
    # {"shape", "layers", "seq", "batch", "dtype", "beta", "device"} each.
    cases: list[dict[str, Any]]
    out: str
    samples: int = 10
    warmup: int = 2
    seed: int = 0
    memory_limit: int | None = None  # CPU: extra data bytes the worker may take


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_case(
    spec: StepSpec, method: StepMethod, raw: dict[str, Any], emit_line: Callable[[dict], None]
) -> list[Row]:
    """Gate and measure one case; returns its four rows (raises on a failure)."""
    from perfsuite.step.gate import judge, one_pass, reference
    from perfsuite.step.model import build_model, describe_model, make_batch, trivial_loss

    preset, size, device = get_preset(raw["shape"]), case_size(raw), torch.device(raw["device"])
    ids = make_batch(preset, size, spec.seed, raw["device"])
    model = build_model(preset, size, spec.seed, raw["device"])
    emit_line({"model": preset.name, "info": describe_model(model, preset, size)})
    ref = reference(model, ids, raw["beta"], raw["dtype"])
    assert method.decl.step is not None
    loss_of = method.decl.step.patch(model, preset, raw["beta"])
    # The same model's decoder with a loss that costs nothing (the loss share's
    # subtrahend), compiled alike for a method that compiles.
    trivial_of: Callable = functools.partial(trivial_loss, model)
    if method.decl.compiles:
        trivial_of = torch.compile(trivial_of)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    # The first step, gated: compilation, autotuning and AdamW's state all happen here.
    _sync(device)
    start = time.perf_counter()
    loss, grads = one_pass(model, ids, loss_of)
    _sync(device)
    first_ms = (time.perf_counter() - start) * 1e3
    verdict = judge(loss, grads, ref)
    del ref, loss
    for name, p in model.named_parameters():
        p.grad = grads.pop(name, None)
    start = time.perf_counter()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    _sync(device)
    first_ms += (time.perf_counter() - start) * 1e3
    interpreted = method.triton and device.type == "cpu"
    status, reason = "ok", ""
    if not verdict.passed:
        status, reason = "wrong", verdict.explain()
        if interpreted and raw["dtype"] == "bf16":
            reason += f" ({INTERPRETER_BF16_NOTE})"
    elif interpreted:
        reason = INTERPRETED_NOTE
    stepper = Stepper(model, optimizer, loss_of, ids)
    peaks = step_memory(stepper, device)
    samples = min(spec.samples, 3) if interpreted else spec.samples
    flush = CacheFlusher(device)
    times = time_steps(stepper, device, samples, 0 if interpreted else spec.warmup, flush)
    # The same model without its loss, same protocol; its first call may compile.
    warm = spec.warmup + method.decl.compiles  # its first call compiles
    trivial = time_fwd_bwd(model, trivial_of, ids, device, samples, warm, flush)
    fwd_bwd = [f + b for f, b in zip(times["fwd"], times["bwd"], strict=True)]
    loss_ms = max(0.0, quantile(fwd_bwd, 0.5) - quantile(trivial, 0.5))
    rows = case_rows(
        raw,
        method,
        status=status,
        reason=reason,
        compile_ms=first_ms,
        max_abs_err=verdict.max_abs_err,
        loss_err=verdict.loss_err,
        grad_e_err=verdict.grad_e_err,
        grad_c_err=verdict.grad_c_err,
        tolerance=verdict.tolerance,
    )
    for row in rows:
        samples_ms = times[row.phase]
        row.samples_ms = samples_ms
        row.median_ms = quantile(samples_ms, 0.5)
        row.p20_ms, row.p80_ms = quantile(samples_ms, 0.2), quantile(samples_ms, 0.8)
        peak = peaks[row.phase]
        row.peak_bytes, row.peak_abs_bytes, row.rss_peak_bytes = (
            peak.delta,
            peak.absolute,
            peak.rss_delta,
        )
        if row.phase == "step":
            row.loss_ms = loss_ms
    return rows


def run_case(
    spec: StepSpec,
    raw: dict[str, Any],
    emit: Callable[[Row], None],
    emit_line: Callable[[dict], None],
) -> None:
    """Every row of one case reaches ``emit``: measured, or with the status that says why not."""
    method = step_methods()[spec.method]

    def all_rows(status: str, reason: str) -> None:
        for row in case_rows(raw, method, status=status, reason=reason):
            emit(row)

    reason = method.availability(raw["device"])
    if reason is not None:
        return all_rows("unavailable", reason)
    decided = method.case_reason(get_preset(raw["shape"]), raw["dtype"], raw["beta"], raw["device"])
    if decided is not None:
        return all_rows(*decided)
    try:
        rows = measure_case(spec, method, raw, emit_line)
    except Unsupported as err:
        return all_rows("unsupported", str(err))
    except Unavailable as err:
        return all_rows("unavailable", str(err))
    except Exception as err:  # noqa: BLE001 - every failure must reach the results
        return all_rows("oom" if is_oom(err) else "error", describe(err))
    finally:
        gc.collect()
        if raw["device"] == "cuda":
            torch.cuda.empty_cache()
    for row in rows:
        emit(row)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = StepSpec(**json.loads(Path(argv[0]).read_text()))
    if spec.memory_limit is not None:
        limit_memory(spec.memory_limit)
    with open(spec.out, "a", buffering=1) as out:

        def emit_line(line: dict[str, Any]) -> None:
            out.write(json.dumps(line) + "\n")
            out.flush()
            os.fsync(out.fileno())

        def emit(row: Row) -> None:
            emit_line(asdict(row))

        for i, raw in enumerate(spec.cases):
            emit_line({"start": i})
            run_case(spec, raw, emit, emit_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
