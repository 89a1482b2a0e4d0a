"""``perfsuite sweep``: a grid over (tokens, vocab, hidden, β) through ``run``'s workers,
its (method, case) units in a fixed order, shards of them, its file rewritten after every
case (``--resume`` loses only the cases in flight)."""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Any

from perfsuite.harness.command import Checkpoint, command, ended
from perfsuite.harness.kind import checkpointed, run_kind
from perfsuite.harness.progress import ProgressFn, cell_label
from perfsuite.plan.plan import Plan, PlanError
from perfsuite.plan.workloads import workload_label
from perfsuite.results.cells import canonical_order, cell_key, env_differences
from perfsuite.results.provenance import gpu_state
from perfsuite.results.results import new_document
from perfsuite.run import runner
from perfsuite.run.sweep_args import (  # the command line's half, re-exported for cluster
    add_arguments,  # noqa: F401
    check_resume,
    load_resumable,
    out_path,
    parse_gpus,
    parse_redo,
    parse_shard,
    plan_from_args,
)

# One (method, case) of the grid: a worker measures all its phases together.
Unit = tuple[str, dict[str, Any]]


def unit_keys(unit: Unit, phases: list[str]) -> list[tuple]:
    method, case = unit
    label = workload_label(case.get("workload"))
    return [cell_key({**case, "method": method, "phase": p, "workload": label}) for p in phases]


def grid_units(plan: Plan, shard: tuple[int, int] | None = None) -> list[Unit]:
    """Every (method, case) in a fixed order, or shard i of n: every n-th of them, so
    that each shard gets a fair share of the large shapes and of every method."""
    units = list(itertools.product(plan.methods, plan.cases()))
    return units if shard is None else units[shard[0] :: shard[1]]


class Sweep:
    """One sweep: its file (``checkpoint``: resumed rows first), what is done, what to run."""

    def __init__(
        self,
        plan: Plan,
        out: Path,
        *,
        shard: tuple[int, int] | None = None,
        resume: bool = False,
        force: bool = False,
        redo: tuple[str, ...] = (),
        slots: list[dict[str, str]] | None = None,
        grid: dict[str, Any] | None = None,
    ) -> None:
        self.plan, self.out, self.shard, self.force = plan, Path(out), shard, force
        self.slots = slots or [{}]
        # Locked before the file is read: two resumes of it would keep one's rows only.
        start = lambda: self._start(resume, redo, grid)  # noqa: E731
        self.checkpoint = Checkpoint(self.out, overwrite=True, start=start)
        self.checkpoint.env, self.checkpoint.rows = self.env, self.resumed
        self.checkpoint.shape = lambda rows: canonical_order(rows, self.env["plan"])

    def _start(self, resume: bool, redo: tuple[str, ...], grid: dict[str, Any] | None) -> None:
        """Read back the file to resume (refusing other code), then list what is left."""
        plan, shard, force = self.plan, self.shard, self.force
        check_resume(self.out, resume)
        env = runner.plan_env(plan)
        rows: list[dict[str, Any]] = []
        resumed: list[dict[str, Any]] = []
        if resume:
            previous = load_resumable(self.out, env["plan"])
            diffs = env_differences(previous["env"], env)
            if diffs and not force:
                raise PlanError(
                    f"{self.out} was measured under another environment ({'; '.join(diffs)}); "
                    "resume it where it was made, use another --out, or --attempt-all"
                )
            rows = [
                r for r in previous["rows"] if r["status"] != "skipped" and r["status"] not in redo
            ]
            resumed = list(previous["env"].get("sweep", {}).get("resumed", []))
            resumed.append({"at": env["created"], "git": env["git"], "kept_rows": len(rows)})
            env["created_first"] = previous["env"].get(
                "created_first", previous["env"].get("created")
            )
        self.units = grid_units(plan, shard)
        done = {cell_key(r) for r in rows}
        self.todo = [u for u in self.units if not set(unit_keys(u, plan.phases)) <= done]
        self.kept = len(self.units) - len(self.todo)
        env["sweep"] = {
            "grid": grid or {},
            "shard": None if shard is None else f"{shard[0]}/{shard[1]}",
            "workload": workload_label(plan.workload),
            "gpus": [s.get("CUDA_VISIBLE_DEVICES") for s in self.slots if s],
            "forced": force,
            "resumed": resumed,
            "units": len(self.units),
            "units_kept": self.kept,
        }
        self.env, self.resumed = env, rows

    def run(self, progress: ProgressFn | None = None) -> dict[str, Any]:
        """Every cell to go (``harness.kind.run_kind``), ``progress`` told of each, the
        file rewritten after each; the finished document."""
        cases: dict[str, list[dict[str, Any]]] = {}
        for method, case in self.todo:
            cases.setdefault(method, []).append(case)
        self.checkpoint.save()  # the resumed rows under this run's env: before any cell
        env = self.checkpoint.env
        groups = env.setdefault("machine", {"groups": []})["groups"]
        report = checkpointed(env, progress, self.checkpoint)
        run_kind(runner.LossKind(self.plan, self.force), cases, report, groups, slots=self.slots)
        if self.plan.device == "cuda":
            env["gpu_state_after"] = gpu_state()
        return new_document(env, self.checkpoint.shape(self.checkpoint.rows))


def from_args(
    args: argparse.Namespace, shard: tuple[int, int] | None, out: Path | None = None
) -> Sweep:
    """The sweep ``args`` ask for (``shard`` of it), into ``--out`` or an array task's
    ``out`` (resumed when it exists)."""
    plan, grid = plan_from_args(args)
    gpus = parse_gpus(args.gpus, plan.device)
    resume = args.resume if out is None else out.exists()
    part = "" if shard is None else f"-shard{shard[0]}of{shard[1]}"
    out = out or out_path(args, plan.device + part)
    redo = parse_redo(args.redo, args.resume)
    slots = [{"CUDA_VISIBLE_DEVICES": g} for g in gpus] or None
    return Sweep(plan, out, shard=shard, resume=resume, force=args.attempt_all, redo=redo,
                 slots=slots, grid=grid)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from perfsuite.fit import TrimmedConsole

    console = TrimmedConsole(stderr=True, log_path=False)  # no "sweep.py:327" on progress lines
    shard = parse_shard(args.shard)
    sweep = from_args(args, shard)  # bad input: a ValueError, said by perfsuite.cli
    out = sweep.out
    console.print(
        f"sweep: {len(sweep.units)} cells (method x case) in this "
        f"{'shard' if shard else 'grid'}, {sweep.kept} already in {out}, "
        f"{len(sweep.todo)} to go → {out}"
    )

    run = lambda progress, notice: sweep.run(progress)  # noqa: E731
    cost = runner.LossKind(sweep.plan).work
    document = command(sweep.checkpoint, run, console, sweep.todo, label=cell_label, cost=cost)
    return ended(document, out, console)
