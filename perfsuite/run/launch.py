"""A multi-rank worker: each case's fp32 reference computed once (off the ranks' memory),
then K ranks by torch's elastic launcher; a ``{"failed": case, ...}`` line names the rank
that failed first and why."""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import torch

from perfsuite.harness.lifecycle import read_json_lines
from perfsuite.harness.worker import describe, emitter, is_oom
from perfsuite.plan.registry import methods_for
from perfsuite.run.correctness import QUANTITIES, gate_reference
from perfsuite.run.ranks import peer_gone, record_path, reference_path, serve_rank
from perfsuite.run.worker import WorkerSpec, method_case


def write_references(spec: WorkerSpec) -> None:
    """Each case's fp32 reference (loss, dE, dC) and tolerances, one file per case."""
    method = methods_for("tp")[spec.method]
    for index, raw in enumerate(spec.cases):
        case = method_case(method, raw)
        try:
            _, reference, bounds = gate_reference(case, spec.seed, raw.get("workload"))
            saved: dict[str, Any] = {q: reference.get(q).cpu() for q in QUANTITIES}
            saved["bounds"] = bounds
        except Exception as err:  # noqa: BLE001 - the case's rows say it, the rest go on
            saved = {"error": ("oom: " if is_oom(err) else "") + describe(err)}
        torch.save(saved, reference_path(spec.out, index))
        del saved
        gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def root_cause(failures: dict[int, Any], out: str, world: int, timeout_s: float) -> tuple[str, str]:
    """``(status, reason)`` of the rank that failed first: a rank's own error (not a
    peer's disappearance); a rank killed by a signal but the launcher's SIGTERM; a
    collective timed out, naming who never joined; the one rank that left no word; the
    first record or exit."""
    records = []
    for rank in range(world):  # a rank that failed first may not have exited yet
        path = record_path(out, rank)
        if path.exists():
            records.append((rank, json.loads(path.read_text())))
    records.sort(key=lambda item: item[1]["time"])
    own = [(r, rec) for r, rec in records if not peer_gone(rec["reason"])]
    if own:
        rank, rec = own[0]
        return rec["status"], f"rank {rank}: {rec['reason']}"
    # gloo aborts a rank whose peer vanished mid-collective: SIGABRT is a consequence
    # unless it is all there is.
    killed = sorted(
        (-f.exitcode == signal.SIGABRT, f.timestamp, rank, f.exitcode)
        for rank, f in failures.items()
        if f.exitcode < 0 and -f.exitcode != signal.SIGTERM
    )
    if killed:
        *_, rank, code = killed[0]
        name = signal.Signals(-code).name
        if name == "SIGKILL":
            return "oom", f"rank {rank} killed by SIGKILL (likely the kernel's OOM killer)"
        return "error", f"rank {rank} died of {name}"
    silent = [r for r in range(world) if r not in {rank for rank, _ in records}]
    late = [(r, rec) for r, rec in records if "timed out" in rec["reason"].lower()]
    if late:
        rank, rec = late[0]
        absent = f"rank {', '.join(map(str, silent))} never joined it" if silent else "a peer"
        return "error", (
            f"a collective waited past the {timeout_s:g} s timeout (--collective-timeout): "
            f"{absent}; rank {rank}: {rec['reason']}"
        )
    if records and len(silent) == 1:  # its peers lost it: it left no error of its own
        return "error", (
            f"rank {silent[0]} died without a word (a signal such as the OOM killer's "
            f"SIGKILL, or a crash); rank {records[0][0]}: {records[0][1]['reason']}"
        )
    if records:
        rank, rec = records[0]
        return rec["status"], f"rank {rank}: {rec['reason']}"
    rank, first = min(failures.items(), key=lambda item: item[1].timestamp)
    return "error", f"rank {rank} exited with code {first.exitcode}"


def launch(spec_path: str) -> int:
    """The multi-rank worker (``python -m perfsuite.run.launch SPEC.json``): K ranks, each
    ``perfsuite.run.ranks.serve_rank`` started by torch's elastic launcher."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    spec = WorkerSpec(**json.loads(Path(spec_path).read_text()))
    tp = int(spec.cases[0]["tp"])
    write_references(spec)  # each rank caps its own memory (``serve``)
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=tp,
        run_id=f"perfsuite-{os.getpid()}-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.1,
        # Not fork: a process that used CUDA cannot fork, and a forked rank inherits
        # GNU OpenMP's state (it hangs, or with one thread here runs GEMMs 20x slower).
        start_method="spawn",
        # Error files in the worker's scratch folder, not a torchelastic_* one in /tmp.
        logs_specs=DefaultLogsSpecs(log_dir=str(Path(spec.out).parent / "elastic")),
    )
    try:
        elastic_launch(config, serve_rank)(spec_path)
    except ChildFailedError as err:
        status, reason = root_cause(err.failures, spec.out, tp, spec.collective_timeout_s)
        starts = [line["start"] for line in read_json_lines(Path(spec.out)) if "start" in line]
        with emitter(spec.out) as emit:  # the case in flight
            emit({"failed": (starts or [0])[-1], "status": status, "reason": reason[:500]})
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(launch(sys.argv[1]))
