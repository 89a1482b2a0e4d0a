"""One method's loss cells in a fresh process (``WORKER``, served by
``perfsuite.harness.worker``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from perfsuite.harness.schedule import paused
from perfsuite.harness.worker import Phase, Served, case_rows, failure, fill, gate_status, holding
from perfsuite.measure.clocks import watch_clocks
from perfsuite.measure.memory import freeze_what_exists, measure_peak
from perfsuite.measure.profile import PROFILED_UNTIMED, profile_call, trace_name
from perfsuite.measure.timers import TimerUnsupported, time_with
from perfsuite.measure.timing import CacheFlusher, Timing, cpu_clocked, sampling, wall_ms
from perfsuite.method import Case, LossFn, SimpleMethod
from perfsuite.plan.registry import get_method
from perfsuite.results.results import PHASES, Row
from perfsuite.run.correctness import Outcome, bit_identical, gate_reference, judge, run_once
from perfsuite.run.inputs import Inputs
from perfsuite.tp_method import case_of

# What identifies a loss case in its rows.
CASE_KEYS = (
    "shape", "tokens", "vocab", "hidden", "dtype", "beta", "softcap", "device", "tp", "timer",
)  # fmt: skip


@dataclass
class WorkerSpec:
    method: str
    cases: list[dict[str, Any]]  # Case fields plus "shape"
    out: str
    phases: list[str] = field(default_factory=lambda: list(PHASES))
    samples: int = 20
    warmup: int = 3
    seed: int = 0
    # Extra bytes of data memory the process may take (CPU only); provokes `oom`.
    memory_limit: int | None = None
    # Multi-rank cells (perfsuite.run.ranks): seconds any one collective may wait.
    collective_timeout_s: float = 300.0
    # How samples are timed (measure.timers), and the folder of --profile's traces.
    timer: str = "events"
    profile: str | None = None


INTERPRETED_REASON = (
    "Triton interpreter on CPU: timings say nothing about GPU speed (one sample per phase: "
    "the CPU time of its memory pass's call, profiler on; gate and memory as any row's)"
)


def method_case(method: Any, raw: dict[str, Any]) -> Case:
    """The ``Case`` of a case dict as ``method`` computes it (with a variant's terms)."""
    terms = getattr(method, "terms", None)
    return case_of(raw) if terms is None else terms.apply(case_of(raw))


def first_calls(
    loss_fn: LossFn, inputs: Inputs, device: torch.device, interpreted: bool
) -> tuple[Outcome, float, bool | None]:
    """The first call's outcome and milliseconds (it compiles: ``compile_ms``, never a
    sample), and whether a second gives every bit of it again (None: interpreted)."""
    outcome, ms = wall_ms(lambda: run_once(loss_fn, inputs), device)
    return outcome, ms, None if interpreted else bit_identical(outcome, run_once(loss_fn, inputs))


def run_case(
    spec: WorkerSpec,
    method: SimpleMethod,
    index: int,
    raw: dict[str, Any],
    emit: Callable[[Row], None],
    stage: Callable[[str], None] = lambda text: None,
) -> None:
    """Every phase of one case, each row to ``emit`` once known; ``stage`` hears what
    starts."""
    case = method_case(method, raw)
    device = torch.device(case.device)
    interpreted = method.caps.triton and device.type == "cpu"
    done: set[str] = set()

    def rows(**fields: Any) -> list[Row]:
        return case_rows("loss", spec.method, raw, spec.phases, interpreted=interpreted, **fields)

    def rest(status: str, reason: str) -> None:
        for row in rows(status=status, reason=reason):
            if row.phase not in done:
                emit(row)

    reason = method.availability(case.device)
    if reason is not None:
        return rest("unavailable", reason)
    try:
        stage("gate")
        inputs, reference, bounds = gate_reference(case, spec.seed, raw.get("workload"))
        loss_fn = method.prepare(case, inputs.c)
        outcome, compile_ms, deterministic = first_calls(loss_fn, inputs, device, interpreted)
        freeze_what_exists()  # and what the method imported on its first calls
        verdict = judge(outcome, reference, bounds)
        del reference, outcome
        said = INTERPRETED_REASON if interpreted else ""
        status, reason = gate_status(verdict, interpreted, case.dtype, said)
        how = sampling(spec.samples, spec.warmup, interpreted)
        # Interpreted: the memory pass's call is the sample (``cpu_clocked``), no timing pass.
        flush = None if how.cpu_time else CacheFlusher(device)  # a 128 MiB buffer on CPU
        # Interpreted: the fwd memory pass's loss, which is the bwd phase's set-up (its
        # graph, no gradients) without another interpreted forward.
        carried: torch.Tensor | None = None
        gate = verdict.fields(compile_ms=compile_ms, entropy=inputs.entropy)
        for row in rows(status=status, reason=reason, deterministic=deterministic, **gate):
            phase = Phase(row.phase, loss_fn, inputs)
            if row.phase == "bwd" and carried is not None:
                phase.loss = carried
            else:
                phase.setup()
            carried = None
            stage(f"{row.phase} memory")
            body, clocked = cpu_clocked(phase.body)
            peak = measure_peak(body, device)
            if not how.cpu_time:
                stage(f"{row.phase} timing, {how.samples} sample(s)")
                with paused():
                    try:
                        with watch_clocks(device) as clocks:
                            timing = time_with(
                                spec.timer, phase.body, device, samples=how.samples,
                                warmup=how.warmup, setup=phase.setup, flush=flush,
                            )  # fmt: skip
                        row.clocks = clocks.summary
                    except TimerUnsupported as err:  # its memory is measured: keep it
                        timing = Timing()
                        row.status, row.reason = "unsupported", f"--timer {spec.timer}: {err}"
                        if spec.profile is not None:
                            row.reason += f"; {PROFILED_UNTIMED}"
                    if spec.profile is not None:
                        stage(f"{row.phase} profile")  # after the samples, never inside
                        row.trace = trace_name(
                            spec.method, raw["shape"], case.dtype, case.beta, row.phase
                        )
                        row.breakdown = asdict(profile_call(
                            phase.body, device, setup=phase.setup, flush=flush,
                            trace=Path(spec.profile) / row.trace,
                        ))  # fmt: skip
            else:  # interpreted: the memory pass's call is its one sample
                timing = Timing(clocked[: how.samples])
                carried = phase.loss if row.phase == "fwd" else None
            phase.reset()
            fill(row, peak, timing)
            emit(row)
            done.add(row.phase)
    except Exception as err:  # noqa: BLE001 - every failure must reach the results
        rest(*failure(err))


WORKER = Served(WorkerSpec, run_case, holding(lambda spec: get_method(spec.method)))
