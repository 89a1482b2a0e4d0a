"""One method's cells at one TP size, inside each of the K ranks.

``perfsuite.run.launch`` starts the ranks through torch's elastic launcher; each runs
``rank_main``: it joins the process group (NCCL, one GPU a rank, on CUDA; gloo on
CPU), every collective bounded by the spec's timeout, and for each case builds the
same full inputs as a one-device worker, keeps its Megatron-layout rows of C, and

* gates the method: its loss, the full dE and its dC rows against the fp32 reference
  on the whole problem (computed once by the launcher), with CCE's rule; a cell passes
  only when every rank does;
* per phase, measures each rank's peak above its inputs (the maximum is reported),
  times each sample between a barrier and the rank's clock (CUDA events, perf_counter
  on CPU; the sample is the slowest rank's), and profiles one call's collectives.

Rank 0 writes the rows, one JSON line each, as the single-device worker does. A rank
that fails outside the method's own statuses writes why to its record file and exits:
the launcher tears the group down and names the rank.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from perfsuite.measure.collectives import measure_collectives
from perfsuite.measure.memory import measure_peak
from perfsuite.measure.timing import CacheFlusher, Timing, time_spans
from perfsuite.method import Unavailable, Unsupported
from perfsuite.plan.registry import methods_for
from perfsuite.run.correctness import Outcome, bit_identical, judge, run_once
from perfsuite.run.inputs import Inputs, make_inputs
from perfsuite.run.worker import Phase, WorkerSpec, _rows, describe, is_oom
from perfsuite.tp_method import ParallelMethod, Shard, case_of, shard_ranges

MAX = dist.ReduceOp.MAX if dist.is_available() else None
# What a rank says when a peer died under it: a consequence, not the cause.
PEER_GONE = ("connection closed", "connection reset", "timed out", "timeout", "broken pipe")
# How long such a rank waits before it exits: the launcher reports the first rank it
# sees fail, which must be the one that died first, not the peer that lost it.
PEER_GONE_WAIT_S = 2.0


def peer_gone(reason: str) -> bool:
    """Whether a rank's error only says a peer went away (or never came)."""
    text = reason.lower()
    return any(words in text for words in PEER_GONE)


def record_path(out: str, rank: int) -> Path:
    """Where rank ``rank`` says why it failed (read by the launcher)."""
    return Path(f"{out}.rank{rank}.json")


def reference_path(out: str, index: int) -> Path:
    """The launcher's fp32 reference (or why there is none) for case ``index``."""
    return Path(f"{out}.ref{index}.pt")


def _all_max(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=MAX)
    return t.tolist()


def _agree(status: tuple[str, str] | None) -> tuple[str, str] | None:
    """Every rank's (status, reason) or None; the first rank's that has one."""
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, status)
    for rank, item in enumerate(gathered):
        if item is not None:
            return item[0], (item[1] if len(gathered) == 1 else f"rank {rank}: {item[1]}")
    return None


def _timed(phase: Phase, samples: int, warmup: int, device: torch.device) -> list[float]:
    """Per-sample ms of the slowest rank; every sample starts after a barrier."""
    spans = time_spans(
        [phase.body], device, samples=samples, warmup=warmup, setup=phase.setup,
        flush=CacheFlusher(device), barrier=dist.barrier,
    )  # fmt: skip
    return _all_max([ms for (ms,) in spans], device)


def _gate(
    outcome: Outcome, reference: dict[str, Any], shard: Shard
) -> tuple[bool, dict[str, float], str]:
    """This rank's verdict, then every rank's combined: (passed, worst errors, reason)."""
    mine = Outcome(reference["loss"], reference["grad_e"], reference["grad_c"])
    verdict = judge(outcome, mine, reference["bounds"])
    gathered: list[Any] = [None] * shard.world
    dist.all_gather_object(gathered, (verdict.passed, verdict.errors, verdict.explain()))
    errors = {
        q: max((g[1][q] for g in gathered), key=lambda x: float("inf") if x != x else x)
        for q in verdict.errors
    }
    reasons = [f"rank {r}: {g[2]}" for r, g in enumerate(gathered) if not g[0]]
    return all(g[0] for g in gathered), errors, "; ".join(reasons)


def run_rank_case(
    spec: WorkerSpec, method: ParallelMethod, index: int, raw: dict[str, Any], emit: Any
) -> None:
    """Every phase of one case on this rank; rank 0 emits the rows."""
    rank, world = dist.get_rank(), dist.get_world_size()
    case = case_of(raw)
    if method.terms is not None:
        case = method.terms.apply(case)
    device = torch.device(case.device)
    start, stop = shard_ranges(case.vocab, world)[rank]
    shard = Shard(rank, world, start, stop, case.vocab)

    def rows(**fields: Any) -> None:
        if rank == 0:
            for row in _rows(raw, spec, method, **fields):
                row.tp = world
                emit(row)

    reference = torch.load(reference_path(spec.out, index), map_location=device)
    if "error" in reference:  # the reference itself failed (unusable inputs)
        return rows(status="error", reason=reference["error"])
    inputs = make_inputs(case, spec.seed, raw.get("workload"))
    c_shard = inputs.c.detach()[start:stop].clone().requires_grad_(True)
    mine = Inputs(inputs.e, c_shard, inputs.targets, inputs.workload, inputs.entropy)
    del inputs
    reference["grad_c"] = reference["grad_c"][start:stop]
    decided: tuple[str, str] | None = None
    try:
        loss_fn = method.prepare_tp(case, c_shard, shard)
    except Unsupported as err:
        decided = ("unsupported", str(err))
    except Unavailable as err:
        decided = ("unavailable", str(err))
    decided = _agree(decided)
    if decided is not None:
        return rows(status=decided[0], reason=decided[1])
    t0 = time.perf_counter()
    outcome = run_once(loss_fn, mine)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    compile_ms = _all_max([(time.perf_counter() - t0) * 1e3], device)[0]
    passed, errors, why = _gate(outcome, reference, shard)
    interpreted = method.caps.triton and device.type == "cpu"
    deterministic = None
    if not interpreted:
        same = bit_identical(outcome, run_once(loss_fn, mine))
        deterministic = _all_max([0.0 if same else 1.0], device)[0] == 0.0
    del outcome
    status, reason = ("ok", "") if passed else ("wrong", why)
    gate = dict(
        max_abs_err=max(errors.values()),
        loss_err=errors["loss"],
        grad_e_err=errors["grad_e"],
        grad_c_err=errors["grad_c"],
        tolerance=reference["bounds"],
        compile_ms=compile_ms,
        entropy=mine.entropy,
        deterministic=deterministic,
    )
    del reference
    for row in _rows(raw, spec, method, status=status, reason=reason, **gate):
        phase = Phase(row.phase, loss_fn, mine)
        phase.setup()
        peak = measure_peak(phase.body, device)
        rss = peak.rss_delta if peak.rss_delta is not None else -1
        delta, absolute, rss = _all_max([peak.delta, peak.absolute, rss], device)
        phase.setup()
        comms = measure_collectives(phase.body, device)
        comm_ms = _all_max([comms.ms], device)[0]
        interpreted_samples = min(spec.samples, 3) if interpreted else spec.samples
        samples = _timed(phase, interpreted_samples, 0 if interpreted else spec.warmup, device)
        phase.reset()
        if rank == 0:
            timing = Timing(samples)
            row.tp = world
            row.peak_bytes, row.peak_abs_bytes = int(delta), int(absolute)
            row.rss_peak_bytes = int(rss) if rss >= 0 else None
            row.samples_ms = samples
            row.median_ms, row.p20_ms, row.p80_ms = timing.median_ms, timing.p20_ms, timing.p80_ms
            row.collectives, row.collective_bytes = comms.count, comms.nbytes
            row.collective_ms = comm_ms
            if interpreted and status == "ok":
                row.reason = "Triton interpreter on CPU: timings say nothing about GPU speed"
            emit(row)


def _init(spec: WorkerSpec, device_type: str) -> torch.device:
    local = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    timeout = timedelta(seconds=spec.collective_timeout_s)
    if device_type == "cuda":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", timeout=timeout, device_id=device)
        return device
    # K ranks share the cores: each gets its part, instead of K x all of them.
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world))
    dist.init_process_group("gloo", timeout=timeout)
    return torch.device("cpu")


def rank_main(spec_path: str) -> int:
    """A rank's whole life: join the group, measure each case, leave the group."""
    # The SIGTERM that stops a rank after a peer failed must end it, never raise in it
    # (torch's elastic handlers turn it into an exception: it would read as its error).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    spec = WorkerSpec(**json.loads(Path(spec_path).read_text()))
    device_type = spec.cases[0]["device"]
    device = _init(spec, device_type)
    rank = dist.get_rank()
    method = methods_for("tp")[spec.method]
    index = -1
    try:
        with open(spec.out, "a", buffering=1) as out:

            def emit(row: Any) -> None:
                from dataclasses import asdict

                out.write(json.dumps(asdict(row)) + "\n")
                out.flush()
                os.fsync(out.fileno())

            for index, raw in enumerate(spec.cases):
                if rank == 0:
                    out.write(json.dumps({"start": index}) + "\n")
                    out.flush()
                run_rank_case(spec, method, index, raw, emit)
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    except BaseException as err:
        status = "oom" if is_oom(err) else "error"
        record = {"case": index, "status": status, "reason": describe(err), "time": time.time()}
        record_path(spec.out, rank).write_text(json.dumps(record))
        if peer_gone(record["reason"]):
            time.sleep(PEER_GONE_WAIT_S)
        raise
    dist.destroy_process_group()
    return 0
