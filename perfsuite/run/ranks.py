"""One method's cells at one TP size, in each of the K ranks: a cell passes the gate when
every rank does, memory is the largest rank's peak, a sample the slowest rank's; a rank
that fails writes why to its record file for the launcher (docs/scale-out.md)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from perfsuite.harness.worker import Phase, Served, case_rows, failure, fill, gate_status, serve
from perfsuite.measure.collectives import measure_collectives
from perfsuite.measure.memory import Peak, measure_peak
from perfsuite.measure.timing import CacheFlusher, Timing, sampling, time_spans
from perfsuite.method import SimpleMethod, Unavailable, Unsupported
from perfsuite.plan.registry import methods_for
from perfsuite.run.correctness import Outcome, Verdict, judge
from perfsuite.run.inputs import Inputs, make_inputs
from perfsuite.run.worker import WorkerSpec, first_calls, method_case
from perfsuite.tp_method import Shard, shard_ranges

MAX = dist.ReduceOp.MAX if dist.is_available() else None
# What a rank says when a peer died under it: a consequence, not the cause.
PEER_GONE = ("connection closed", "connection reset", "timed out", "timeout", "broken pipe")
# Such a rank waits before it exits: the launcher names the first rank it sees fail.
PEER_GONE_WAIT_S = 2.0


def peer_gone(reason: str) -> bool:
    """Whether a rank's error only says a peer went away (or never came)."""
    return any(words in reason.lower() for words in PEER_GONE)


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
    """The first rank's (status, reason) that is not None."""
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, status)
    for rank, item in enumerate(gathered):
        if item is not None:
            return item[0], (item[1] if len(gathered) == 1 else f"rank {rank}: {item[1]}")
    return None


def _gate(outcome: Outcome, reference: dict[str, Any], shard: Shard) -> Verdict:
    """Every rank's verdict combined: the worst errors, and each failing rank's words."""
    mine = Outcome(reference["loss"], reference["grad_e"], reference["grad_c"])
    verdict = judge(outcome, mine, reference["bounds"])
    gathered: list[Any] = [None] * shard.world
    dist.all_gather_object(gathered, (verdict.passed, verdict.errors, verdict.explain()))
    errors = {
        q: max((g[1][q] for g in gathered), key=lambda x: float("inf") if x != x else x)
        for q in verdict.errors
    }
    reasons = [f"rank {r}: {g[2]}" for r, g in enumerate(gathered) if not g[0]]
    return Verdict(not reasons, errors, reference["bounds"], reasons)


def run_case(
    spec: WorkerSpec, method: SimpleMethod, index: int, raw: dict[str, Any], emit: Any, stage: Any
) -> None:
    """Every phase of one case on this rank (rank 0's ``emit`` writes the rows)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    case = method_case(method, raw)
    device = torch.device(case.device)
    start, stop = shard_ranges(case.vocab, world)[rank]
    shard = Shard(rank, world, start, stop, case.vocab)

    interpreted = method.caps.triton and device.type == "cpu"

    def rows(**fields: Any) -> list[Any]:
        return case_rows("tp", spec.method, raw, spec.phases, interpreted=interpreted, **fields)

    def decided(status: str, reason: str) -> None:
        for row in rows(status=status, reason=reason):
            emit(row)

    reference = torch.load(reference_path(spec.out, index), map_location=device)
    if "error" in reference:  # the reference itself failed (unusable inputs)
        return decided("error", reference["error"])
    inputs = make_inputs(case, spec.seed, raw.get("workload"))
    c_shard = inputs.c.detach()[start:stop].clone().requires_grad_(True)
    mine = Inputs(inputs.e, c_shard, inputs.targets, inputs.workload, inputs.entropy)
    del inputs
    reference["grad_c"] = reference["grad_c"][start:stop]
    refused: tuple[str, str] | None = None
    try:
        loss_fn = method.prepare_tp(case, c_shard, shard)
    except (Unsupported, Unavailable) as err:
        refused = failure(err)
    refused = _agree(refused)
    if refused is not None:
        return decided(*refused)
    outcome, compile_ms, same = first_calls(loss_fn, mine, device, interpreted)
    compile_ms, differs = _all_max([compile_ms, float(same is False)], device)
    deterministic = None if same is None else differs == 0.0
    verdict = _gate(outcome, reference, shard)
    del outcome, reference
    said = "Triton interpreter on CPU: timings say nothing about GPU speed" if interpreted else ""
    status, reason = gate_status(verdict, interpreted, case.dtype, said)
    gate = verdict.fields(compile_ms=compile_ms, entropy=mine.entropy)
    how = sampling(spec.samples, spec.warmup, interpreted)
    flush = CacheFlusher(device)
    for row in rows(status=status, reason=reason, deterministic=deterministic, **gate):
        phase = Phase(row.phase, loss_fn, mine)
        phase.setup()
        peak = measure_peak(phase.body, device)
        phase.setup()
        comms = measure_collectives(phase.body, device)
        rss = -1 if peak.rss_delta is None else peak.rss_delta
        delta, absolute, rss, comm_ms = _all_max([peak.delta, peak.absolute, rss, comms.ms], device)
        # Every sample starts after a barrier: a sample is the slowest rank's.
        spans = time_spans(
            [phase.body], device, samples=how.samples, warmup=how.warmup, setup=phase.setup,
            flush=flush, barrier=dist.barrier, cpu_time=how.cpu_time,
        )  # fmt: skip
        times = _all_max([ms for (ms,) in spans], device)
        phase.reset()
        if rank == 0:
            peak = Peak(int(delta), int(absolute), int(rss) if rss >= 0 else None)
            fill(row, peak, Timing(times))
            row.collectives, row.collective_bytes = comms.count, comms.nbytes
            row.collective_ms = comm_ms
            emit(row)


@contextmanager
def _rank(spec: WorkerSpec, emit: Any) -> Iterator[tuple[SimpleMethod, Any]]:
    """A rank's life around its cases: join the group, leave it; rank 0 writes the lines;
    a rank that fails writes why to its record file first."""
    # The SIGTERM that stops a rank after a peer failed must end it, never raise in it
    # (torch's elastic handlers turn it into an exception: it would read as its error).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    timeout = timedelta(seconds=spec.collective_timeout_s)
    if spec.cases[0]["device"] == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", timeout=timeout, device_id=torch.device("cuda", local))
    else:  # K ranks share the cores: each gets its part, instead of K x all of them.
        world = int(os.environ.get("WORLD_SIZE", "1"))
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world))
        dist.init_process_group("gloo", timeout=timeout)
    silent = lambda line: None  # noqa: E731 - a rank but the first: rank 0 writes
    try:
        yield methods_for("tp")[spec.method], emit if dist.get_rank() == 0 else silent
    except BaseException as err:
        status, reason = failure(err)
        record = {"status": status, "reason": reason, "time": time.time()}
        record_path(spec.out, dist.get_rank()).write_text(json.dumps(record))
        if peer_gone(reason):
            time.sleep(PEER_GONE_WAIT_S)
        raise
    dist.destroy_process_group()


def serve_rank(spec_path: str) -> int:
    """Each of the K ranks torch's elastic launcher starts: the one worker loop (a
    function: the launcher names it)."""
    return serve(Served(WorkerSpec, run_case, _rank), spec_path)
