"""One method's training steps, measured inside a fresh process: each row is appended to
the spec's ``out`` file as soon as it is known (``WORKER``, served by
``perfsuite.harness.worker``), so that a crash loses only the case in flight."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from perfsuite.harness.worker import INTERPRETER_BF16_NOTE, Served, failure, fill, holding
from perfsuite.measure.stats import quantile
from perfsuite.measure.timing import CacheFlusher, Sampling, Timing, sampling
from perfsuite.method import SimpleMethod
from perfsuite.plan.registry import methods_for
from perfsuite.results.results import Row
from perfsuite.step.cases import case_rows, case_size
from perfsuite.step.measure import Stepper, step_memory, time_fwd_bwd, time_steps
from perfsuite.step.model import model_class
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
    spec: StepSpec,
    method: SimpleMethod,
    raw: dict[str, Any],
    emit: Callable[[Any], None],
    stage: Callable[[str], None] = lambda text: None,
) -> list[Row]:
    """Gate and measure one case; returns its four rows (raises on a failure). ``stage``
    names what it does now, for the parent's progress lines (a stage may take minutes)."""
    from perfsuite.step.gate import one_pass, reference, step_verdict
    from perfsuite.step.model import build_model, describe_model, make_batch, trivial_loss

    preset, size, device = get_preset(raw["shape"]), case_size(raw), torch.device(raw["device"])
    stage("building the model")
    ids = make_batch(preset, size, spec.seed, raw["device"])
    model = build_model(preset, size, spec.seed, raw["device"])
    emit({"model": preset.name, "info": describe_model(model, preset, size)})
    stage("the fp32 reference pass")
    ref = reference(model, ids, raw["beta"], raw["dtype"])
    assert method.step is not None
    loss_of = method.step.patch(model, preset, raw["beta"])
    # The same model's decoder with a loss that costs nothing (the loss share's
    # subtrahend), compiled alike for a method that compiles.
    trivial_of: Callable = functools.partial(trivial_loss, model)
    if method.compiles:
        trivial_of = torch.compile(trivial_of)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    # The first step, gated: compilation, autotuning and AdamW's state all happen here.
    stage("the first step, gated")
    _sync(device)
    start = time.perf_counter()
    loss, grads = one_pass(model, ids, loss_of)
    _sync(device)
    first_ms = (time.perf_counter() - start) * 1e3
    verdict = step_verdict(loss, grads, ref)
    del ref, loss
    for name, p in model.named_parameters():
        p.grad = grads.pop(name, None)
    stepper = Stepper(model, optimizer, loss_of, ids)
    start = time.perf_counter()
    stepper.optimize()
    _sync(device)
    first_ms += (time.perf_counter() - start) * 1e3
    interpreted = method.caps.triton and device.type == "cpu"
    status, reason = "ok", INTERPRETED_NOTE if interpreted else ""
    if not verdict.passed:
        status, reason = "wrong", verdict.explain()
        if interpreted and raw["dtype"] == "bf16":
            reason += f" ({INTERPRETER_BF16_NOTE})"
    peaks = step_memory(stepper, device)
    how = sampling(spec.samples, spec.warmup, interpreted)
    flush = CacheFlusher(device)
    stage(f"timing {how.samples} steps")
    times = time_steps(stepper, device, how, flush)
    # The same model without its loss, same protocol; its first call may compile.
    warm = Sampling(how.samples, how.warmup + method.compiles, how.cpu_time)
    stage("timing the model without its loss")
    trivial = time_fwd_bwd(model, trivial_of, ids, device, warm, flush)
    fwd_bwd = [f + b for f, b in zip(times["fwd"], times["bwd"], strict=True)]
    gate = verdict.fields(compile_ms=first_ms)
    rows = case_rows(raw, method, status=status, reason=reason, **gate)
    for row in rows:
        fill(row, peaks[row.phase], Timing(times[row.phase]))
    rows[-1].loss_ms = max(0.0, quantile(fwd_bwd, 0.5) - quantile(trivial, 0.5))  # the step
    return rows


def run_case(
    spec: StepSpec,
    method: SimpleMethod,
    index: int,
    raw: dict[str, Any],
    emit: Callable[[Any], None],
    stage: Callable[[str], None] = lambda text: None,
) -> None:
    """Every row of one case reaches ``emit`` (with the lines the harness keeps besides,
    ``{"model": ...}``): measured, or with the status that says why not (the parent
    decided the cases the method cannot run)."""
    try:
        rows = measure_case(spec, method, raw, emit, stage)
    except Exception as err:  # noqa: BLE001 - every failure must reach the results
        status, reason = failure(err)
        rows = case_rows(raw, method, status=status, reason=reason)
    for row in rows:
        emit(row)


def _method(spec: StepSpec) -> SimpleMethod:
    """The method, and transformers' model classes imported before the worker's freeze."""
    for raw in spec.cases:
        model_class(get_preset(raw["shape"]))
    return methods_for("step")[spec.method]


WORKER = Served(StepSpec, run_case, holding(_method))
