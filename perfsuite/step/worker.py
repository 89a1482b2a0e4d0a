"""One method's training steps, measured in a fresh process (``WORKER``, served by
``perfsuite.harness.worker``: a crash loses only the case in flight)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from perfsuite.harness.worker import Served, case_rows, failure, fill, gate_status, holding
from perfsuite.measure.memory import measure_spans
from perfsuite.measure.stats import quantile
from perfsuite.measure.timing import (
    CacheFlusher,
    Timing,
    sampling,
    time_samples,
    time_spans,
    wall_ms,
)
from perfsuite.method import SimpleMethod
from perfsuite.plan.registry import methods_for
from perfsuite.results.results import STEP_PHASES
from perfsuite.step.model import model_class
from perfsuite.step.plan import case_size
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


def run_case(
    spec: StepSpec,
    method: SimpleMethod,
    index: int,
    raw: dict[str, Any],
    emit: Callable[[Any], None],
    stage: Callable[[str], None],
) -> None:
    """Gate and measure one case; every row reaches ``emit``: measured, or with the status
    that says why not (the parent decided the cases the method cannot run). ``stage``
    names what it does now, for the parent's progress lines (a stage may take minutes).
    A sample is a whole step, the clock read between its phases (fwd + bwd + opt = step)."""
    interpreted = method.caps.triton and raw["device"] == "cpu"
    try:
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
        pending: list[torch.Tensor] = []  # the forward's loss, until the backward

        def optimize() -> None:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        phases = [lambda: pending.append(loss_of(ids)), lambda: pending.pop().backward(), optimize]
        # The first step, gated: compilation, autotuning and AdamW's state all happen here.
        stage("the first step, gated")
        (loss, grads), first_ms = wall_ms(lambda: one_pass(model, ids, loss_of), device)
        verdict = step_verdict(loss, grads, ref)
        del ref, loss
        for name, p in model.named_parameters():
            p.grad = grads.pop(name, None)
        first_ms += wall_ms(optimize, device)[1]
        said = INTERPRETED_NOTE if interpreted else ""
        status, reason = gate_status(verdict, interpreted, raw["dtype"], said)
        peaks = dict(zip(STEP_PHASES, measure_spans(phases, device), strict=True))
        how = sampling(spec.samples, spec.warmup, interpreted)
        # One protocol for the step and for the model without its loss.
        protocol = dict(samples=how.samples, flush=CacheFlusher(device), cpu_time=how.cpu_time)
        stage(f"timing {how.samples} steps")
        spans = time_spans(phases, device, warmup=how.warmup, **protocol)
        times = {p: [s[i] for s in spans] for i, p in enumerate(STEP_PHASES[:-1])}
        times["step"] = [sum(s) for s in spans]
        stage("timing the model without its loss")
        clear = functools.partial(model.zero_grad, set_to_none=True)
        trivial = time_samples(
            lambda: trivial_of(ids).backward(), device, setup=clear,
            warmup=how.warmup + method.compiles, **protocol,  # its first call may compile
        ).samples_ms  # fmt: skip
        clear()
        fwd_bwd = [f + b for f, b in zip(times["fwd"], times["bwd"], strict=True)]
        gate = verdict.fields(compile_ms=first_ms, status=status, reason=reason)
        rows = case_rows("step", method.name, raw, STEP_PHASES, interpreted=interpreted, **gate)
        for row in rows:
            fill(row, peaks[row.phase], Timing(times[row.phase]))
        rows[-1].loss_ms = max(0.0, quantile(fwd_bwd, 0.5) - quantile(trivial, 0.5))  # the step
    except Exception as err:  # noqa: BLE001 - every failure must reach the results
        status, reason = failure(err)
        fields = dict(status=status, reason=reason, interpreted=interpreted)
        rows = case_rows("step", method.name, raw, STEP_PHASES, **fields)
    for row in rows:
        emit(row)


def _method(spec: StepSpec) -> SimpleMethod:
    """The method, and transformers' model classes imported before the worker's freeze."""
    for raw in spec.cases:
        model_class(get_preset(raw["shape"]))
    return methods_for("step")[spec.method]


WORKER = Served(StepSpec, run_case, holding(_method))
