"""``perfsuite sweep``: a grid over (tokens, vocab, hidden, β) through ``run``'s workers,
its file rewritten after every case (``--resume`` loses only the cases in flight), cells
predicted not to fit recorded ``skipped``, ``--shard i/n`` every n-th cell."""

from __future__ import annotations

import argparse
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfsuite.harness.kind import schedule_kind
from perfsuite.plan.memory_model import device_capacity
from perfsuite.plan.plan import Plan, PlanError
from perfsuite.plan.registry import methods_for
from perfsuite.plan.workloads import workload_label
from perfsuite.results.cells import canonical_order, cell_key, env_differences
from perfsuite.results.lock import claim
from perfsuite.results.results import (
    check_writable,
    new_document,
    nothing_measured,
    status_counts,
    write_results,
)
from perfsuite.run import runner
from perfsuite.run.grid import (
    Unit,
    grid_units,
    parse_gpus,
    parse_shard,
    skip_reason,
    unit_cost,
    unit_keys,
)
from perfsuite.run.sweep_args import (  # the command line's half, re-exported for cluster
    add_arguments,  # noqa: F401
    check_resume,
    load_resumable,
    out_path,
    parse_redo,
    plan_from_args,
)

# (method, case dict, rows of that case) after every finished or skipped case.
CellFn = Callable[["Unit", list[dict[str, Any]]], None]


class Sweep:
    """One sweep's state: the document on disk, what is done, what to run."""

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
        self.lock = threading.Lock()
        check_writable(self.out, overwrite=True)  # a folder: said now, not after a cell
        # Locked before the file is read: two resumes of it would keep one's rows only.
        self.writer = claim(self.out, lambda: self._start(resume, redo, grid))

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
        shard_text = None if shard is None else f"{shard[0]}/{shard[1]}"
        env["sweep"] = {
            "grid": grid or {},
            "shard": shard_text,
            "workload": workload_label(plan.workload),
            "gpus": [s.get("CUDA_VISIBLE_DEVICES") for s in self.slots if s],
            "forced": force,
            "resumed": resumed,
        }
        self.document = new_document(env, rows)
        self.units = grid_units(plan, shard)
        done = {cell_key(r) for r in rows}
        self.todo = [u for u in self.units if not set(unit_keys(u, plan.phases)) <= done]
        self.kept = len(self.units) - len(self.todo)
        self.document["env"]["sweep"]["units"] = len(self.units)
        self.document["env"]["sweep"]["units_kept"] = self.kept

    def save(self) -> None:
        with self.lock:
            doc = self.document
            doc["rows"] = canonical_order(doc["rows"], doc["env"]["plan"])
            write_results(self.out, doc)

    def _add(self, rows: list[dict[str, Any]]) -> None:
        with self.lock:  # a case told twice (Ctrl-C while it was told) is kept once
            have = {cell_key(r) for r in self.document["rows"]}
            self.document["rows"].extend(r for r in rows if cell_key(r) not in have)
        self.save()

    def run(self, on_cell: CellFn | None = None) -> dict[str, Any]:
        known = methods_for(bool(self.plan.tps))
        capacity = None if self.force else device_capacity(self.plan.device, self.plan.memory_limit)
        pending: list[Unit] = []
        skipped: list[dict[str, Any]] = []
        kind = runner.LossKind(self.plan)  # a skipped row is any row decided without a worker
        for unit in self.todo:
            reason = skip_reason(unit, capacity, known)
            if reason is None:
                pending.append(unit)
                continue
            rows = kind.status_rows(unit.method, unit.case, self.plan.phases, "skipped", reason)
            skipped.extend(rows)
            if on_cell is not None:
                on_cell(unit, rows)
        self.document["rows"].extend(skipped)
        self.document["env"]["partial"] = True  # until every cell is in: as run's checkpoints
        self.save()
        self._execute(pending, on_cell)
        del self.document["env"]["partial"]
        if self.plan.device == "cuda":
            from perfsuite.results.provenance import gpu_state

            self.document["env"]["gpu_state_after"] = gpu_state()
        self.save()
        return self.document

    def _batches(self, pending: list[Unit]) -> list[tuple[str, list[Unit]]]:
        """Work items for the slots: per method its pending cases, split round-robin
        across slots when there are several (one worker process per item)."""
        by_method: dict[str, list[Unit]] = {}
        for unit in pending:
            by_method.setdefault(unit.method, []).append(unit)
        n = len(self.slots)
        return [
            (method, units[k::n])
            for method, units in by_method.items()
            for k in range(min(n, len(units)))
        ]

    def _execute(self, pending: list[Unit], on_cell: CellFn | None) -> None:
        from perfsuite.harness.schedule import run_parallel

        free: queue.Queue[dict[str, str]] = queue.Queue()
        for slot in self.slots:
            free.put(slot)

        def measure(item: tuple[str, list[Unit]], slot: dict[str, str]) -> None:
            method, units = item
            by_case = {id(u.case): u for u in units}

            def progress(m: str, case: dict[str, Any], rows: list[dict[str, Any]]) -> None:
                self._add(rows)
                if on_cell is not None:
                    on_cell(by_case[id(case)], rows)

            groups = self.document["env"].setdefault("machine", {"groups": []})["groups"]
            cases = [u.case for u in units]
            runner.run_method(self.plan, method, cases, progress, env=slot, machine=groups)

        def on_free_slot(item: tuple[str, list[Unit]]) -> None:
            slot = free.get()
            try:
                measure(item, slot)
            finally:
                free.put(slot)

        batches = self._batches(pending)
        if len(self.slots) == 1:  # one device: runner's order (interpreted ones in parallel)
            only = self.slots[0]
            kind = runner.LossKind(self.plan)
            schedule_kind(kind, batches, lambda item: item[0], lambda item: measure(item, only))
            return
        run_parallel(batches, on_free_slot, len(self.slots))


def from_args(
    args: argparse.Namespace, shard: tuple[int, int] | None, out: Path | None = None
) -> Sweep:
    """The sweep ``args`` ask for (``shard`` of it), into ``--out`` or, for an array's
    task, ``out`` (resumed when it exists)."""
    plan, grid = plan_from_args(args)
    gpus = parse_gpus(args.gpus, plan.device)
    resume = args.resume if out is None else out.exists()
    part = "" if shard is None else f"-shard{shard[0]}of{shard[1]}"
    out = out or out_path(args, plan.device + part)
    redo = parse_redo(args.redo, args.resume)
    slots = [{"CUDA_VISIBLE_DEVICES": g} for g in gpus] or None
    return Sweep(plan, out, shard=shard, resume=resume, force=args.force, redo=redo,
                 slots=slots, grid=grid)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from perfsuite.fit import TrimmedConsole
    from perfsuite.harness.progress import cell_label, finished_lines

    console = TrimmedConsole(stderr=True, log_path=False)  # no "sweep.py:327" on progress lines
    shard = parse_shard(args.shard)
    sweep = from_args(args, shard)  # bad input: a ValueError, said by perfsuite.cli
    plan, out, kind = sweep.plan, sweep.out, runner.LossKind(sweep.plan)
    costs = {u.index: unit_cost(u, plan, kind.interpreted(u.method)) for u in sweep.todo}
    total_cost = sum(costs.values()) or 1.0
    console.print(
        f"sweep: {len(sweep.units)} cells (method x case) in this "
        f"{'shard' if shard else 'grid'}, {sweep.kept} already in {out}, "
        f"{len(sweep.todo)} to go → {out}"
    )
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[cells]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    done = 0
    # Not a terminal (a log, a CI job): the per-cell lines only, no bar's characters.
    with Progress(
        *columns, console=console, transient=False, disable=not console.is_terminal
    ) as bar:
        task = bar.add_task("sweep", total=total_cost, cells=f"0/{len(sweep.todo)} cells")

        def on_cell(unit: Unit, rows: list[dict[str, Any]]) -> None:
            nonlocal done
            done += 1
            for line in finished_lines(cell_label(unit.method, unit.case), rows):
                bar.console.log(line)
            bar.update(
                task,
                advance=costs.get(unit.index, 0.0),
                description=unit.method,
                cells=f"{done}/{len(sweep.todo)} cells",
            )

        try:
            document = sweep.run(on_cell)
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM: the file holds every finished cell
            sweep.save()  # one told while the signal came in: in the file, not only here
            kept = len(sweep.document["rows"])
            console.print(f"[red]interrupted[/red]: {kept} rows kept in {out}", soft_wrap=True)
            raise
        finally:
            sweep.writer.release()
    console.print(f"results: {out} ({status_counts(document['rows'])} rows)")
    if nothing_measured(document["rows"]):
        console.print("[red]error:[/red] no cell was measured")
        return 1
    return 0
