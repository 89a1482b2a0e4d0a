"""``perfsuite sweep --executor local|slurm``: task i of a submitit job array runs ``sweep
--shard i/N`` into ``<out>.parts/shard-i-of-N.json``, merged into ``--out`` at the end; a
failed task loses only its unfinished cells, and ``--resume`` submits the shards left."""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import re
import shlex
import shutil
import time
from pathlib import Path
from typing import Any

from perfsuite.args import positive_int
from perfsuite.harness.command import ended
from perfsuite.harness.progress import cell_label, finished_lines
from perfsuite.plan.plan import PlanError
from perfsuite.results.cells import canonical_order, cell_key
from perfsuite.results.lock import claim
from perfsuite.results.merge import MergeError, merge_documents
from perfsuite.results.outpath import check_output_dir, check_output_file
from perfsuite.results.results import (
    ResultsError,
    load_results,
    new_document,
    status_counts,
    write_results,
)
from perfsuite.run.sweep_args import add_arguments as add_sweep_arguments
from perfsuite.run.sweep_args import check_resume, load_resumable, out_path, parse_redo

EXECUTORS = ("local", "slurm")
MAX_SHARDS = 16  # default --shards: one per cell up to this many tasks
TIME_LIMIT = 120
SLURM_ONLY = ("partition", "gpus_per_task", "cpus_per_task", "slurm_option")
CLUSTER_ONLY = ("shards", "array_parallelism", "time_limit", *SLURM_ONLY)
# sbatch options that the flags above (or submitit itself) set.
RESERVED_SBATCH = {"partition", "time", "gpus-per-task", "cpus-per-task", "array", "output"}
PART = re.compile(r"shard-(\d+)-of-(\d+)\.json")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_sweep_arguments(p)
    g = p.add_argument_group("job array (docs/scale-out.md)").add_argument
    g("--executor", choices=EXECUTORS, help="run the shards as a submitit job array")
    g("--shards", type=positive_int, help=f"array tasks (default: cells, at most {MAX_SHARDS})")
    g("--array-parallelism", type=positive_int, help="tasks at once (slurm: all; local: 1)")
    g("--time-limit", type=positive_int, metavar="MIN", help=f"per task (default {TIME_LIMIT})")
    g("--partition", help="slurm: the partition to submit to")
    g("--gpus-per-task", type=positive_int, help="slurm: GPUs per task (default 1; cpu: 0)")
    g("--cpus-per-task", type=positive_int, help="slurm: CPUs per task")
    g("--slurm-option", action="append", default=[], metavar="KEY=VALUE",
      help="slurm: another sbatch option, e.g. account=proj (repeatable)")  # fmt: skip


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n, None) not in (None, [])]


def slurm_options(items: list[str]) -> dict[str, Any]:
    """``--slurm-option account=proj`` (or a bare flag, ``exclusive``) -> sbatch's options."""
    options: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip().lstrip("-").replace("_", "-")
        if not key or (eq and not value):
            raise PlanError(f"--slurm-option {item!r}: expected KEY=VALUE, e.g. account=proj")
        if key in RESERVED_SBATCH:
            raise PlanError(f"--slurm-option {item}: perfsuite sets {key} (see sweep --help)")
        options[key] = value if eq else True
    return options


def _check_options(args: argparse.Namespace) -> Any:
    """Everything refused without the grid, before anything is made; submitit."""
    if args.shard is not None:
        raise PlanError(f"--shard {args.shard}: with --executor, --shards N runs every shard")
    if args.executor == "local" and _given(args, SLURM_ONLY):
        raise PlanError(
            f"{', '.join(_given(args, SLURM_ONLY))}: only for --executor slurm (local tasks "
            "run here, on this machine's CPUs and the GPUs this shell sees)"
        )
    parse_redo(args.redo, args.resume)
    slurm_options(args.slurm_option)
    try:
        import submitit
    except ImportError:
        raise PlanError("--executor needs submitit: pip install submitit (or .[cluster])") from None
    missing = [t for t in ("sbatch", "srun") if args.executor == "slurm" and not shutil.which(t)]
    if missing:
        where = "submit from a Slurm login node, or try --executor local"
        raise PlanError(f"--executor slurm: no {missing[0]} on PATH ({where})")
    return submitit


def part_path(parts: Path, i: int, n: int) -> Path:
    return parts / f"shard-{i}-of-{n}.json"


def _split_of_parts(parts: Path) -> int | None:
    """The N of the part files already in ``parts`` (one split only), or None."""
    names = (PART.fullmatch(p.name) for p in parts.glob("shard-*-of-*.json"))
    found = {int(m.group(2)) for m in names if m}
    if len(found) > 1:
        raise PlanError(f"{parts}: parts of several splits (of {sorted(found)}); keep one")
    return found.pop() if found else None


def _done(doc: dict[str, Any] | None, redo: tuple[str, ...], skipped_done: bool) -> set[tuple]:
    """Cells of ``doc`` a re-run keeps (sweep's rule, ``skipped`` ones too unless
    ``--attempt-all``: re-predicting them is no reason to queue for a GPU)."""
    keep = [r for r in (doc or {}).get("rows", []) if r["status"] not in redo]
    return {cell_key(r) for r in keep if skipped_done or r["status"] != "skipped"}


class ArraySweep:
    """What the array must do: its split, the shards with cells missing, where parts go."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.submitit, self.args, planning = _check_options(args), args, args
        from perfsuite.run import sweep

        if args.executor == "slurm" and args.device == "cuda":
            import torch

            # A login node without a GPU plans the grid as cpu (the cell keys do not name
            # the device; the tasks resolve it).
            if not torch.cuda.is_available():
                planning = argparse.Namespace(**{**vars(args), "device": "cpu"})
        self.plan, _ = sweep.plan_from_args(planning)
        self.out = out_path(args, args.executor)
        self.parts = self.out.with_name(self.out.name + ".parts")
        check_output_file(self.out)  # ResultsError: a ValueError, said in one line
        earlier = self.parts.is_dir() and any(self.parts.glob("shard-*.json"))
        check_resume(self.out, args.resume, parts=earlier)
        if earlier and not args.resume:
            raise PlanError(
                f"{self.parts} holds the shards of an earlier sweep: pass --resume to finish "
                "it, or remove the folder"
            )
        self.previous = self._read(self.out)  # another grid's file: refused before any mkdir
        check_output_dir(self.parts, "--out")
        self.logs = self.parts / "logs"
        self.writer = claim(self.out, self._survey)  # the parts are the tasks' to lock

    def _survey(self) -> None:
        from perfsuite.run.sweep import grid_units, unit_keys

        args, plan = self.args, self.plan
        self.units = grid_units(plan)
        existing = _split_of_parts(self.parts)
        if existing is not None and args.shards not in (None, existing):
            raise PlanError(
                f"{self.parts} holds the shards of a sweep split in {existing}: re-run with "
                f"--shards {existing}, or remove the folder"
            )
        self.n = args.shards or existing or min(len(self.units), MAX_SHARDS)
        redo, skipped_done = parse_redo(args.redo, args.resume), not args.attempt_all
        done_out = _done(self.previous, redo, skipped_done)
        self.todo: list[int] = []
        self.kept = 0
        for i in range(self.n):
            part = part_path(self.parts, i, self.n)
            doc = self._read(part)
            done = done_out | _done(doc, redo, skipped_done)
            units = grid_units(plan, (i, self.n))
            left = [u for u in units if not set(unit_keys(u, plan.phases)) <= done]
            self.kept += len(units) - len(left)
            if left:
                self.todo.append(i)
                if doc is None and self.previous is not None:
                    self._seed(i, units)

    def _read(self, path: Path) -> dict[str, Any] | None:
        """``path``'s document (None when absent), refused if of another grid than ours."""
        return load_resumable(path, self.plan.as_dict()) if path.exists() else None

    def _seed(self, i: int, units: list[tuple[str, dict[str, Any]]]) -> None:
        """A part file of the cells ``--out`` already has for the shard: the task
        resumes them (checking their environment) instead of measuring again."""
        from perfsuite.run.sweep import unit_keys

        keys = {k for u in units for k in unit_keys(u, self.plan.phases)}
        rows = [r for r in self.previous["rows"] if cell_key(r) in keys]
        if rows:
            env = copy.deepcopy(self.previous["env"])
            env.setdefault("sweep", {})["shard"] = f"{i}/{self.n}"
            write_results(part_path(self.parts, i, self.n), new_document(env, rows))

    def assemble(self, failed: dict[int, str]) -> dict[str, Any]:
        """The parts merged, plus the rows of the previous ``--out`` no part holds."""
        parts = [part_path(self.parts, i, self.n) for i in range(self.n)]
        # A task stopped before its first cell leaves a part without rows.
        docs = [(str(p), load_results(p, empty=True)) for p in parts if p.exists()]
        # No part at all: every shard was done in --out (a plain sweep's file, resumed).
        merged = merge_documents(docs) if docs else copy.deepcopy(self.previous)
        have = {cell_key(r) for r in merged["rows"]}
        if self.previous is not None:
            merged["rows"] += [r for r in self.previous["rows"] if cell_key(r) not in have]
        merged["rows"] = canonical_order(merged["rows"], merged["env"].get("plan") or {})
        record = {"executor": self.args.executor, "shards": self.n, "submitted": self.todo}
        record["failed"] = {str(i): why for i, why in failed.items()}
        merged["env"].setdefault("sweep", {})["array"] = record
        return merged


def run_shard(args: argparse.Namespace, shard: tuple[int, int], part: str) -> dict[str, Any]:
    """One array task: ``sweep --shard i/N`` into its part file (resumed when there),
    planned here: ``--device auto`` is the task's node's."""
    from perfsuite.run import sweep

    job = sweep.from_args(args, shard, Path(part))
    print(f"shard {shard[0]}/{shard[1]}: {len(job.todo)} of {len(job.units)} cells", flush=True)

    def on_cell(method: str, case: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        print(finished_lines(cell_label(method, case), rows)[0], flush=True)

    with job.checkpoint:
        document = job.run(on_cell)
        job.checkpoint.save(document)
    return {"rows": status_counts(document["rows"]) or "no"}


def _executor(array: ArraySweep) -> Any:
    args, submitit = array.args, array.submitit
    limit = args.time_limit or TIME_LIMIT
    if args.executor == "local":
        executor = submitit.LocalExecutor(folder=array.logs)
        # LocalExecutor sets CUDA_VISIBLE_DEVICES from gpus_per_node: a task must see ours.
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        keep = f"export CUDA_VISIBLE_DEVICES={shlex.quote(cvd)}" if cvd else "true"
        executor.update_parameters(timeout_min=limit, setup=[keep])
        return executor
    executor = submitit.SlurmExecutor(folder=array.logs)
    gpus = args.gpus_per_task if args.gpus_per_task else (None if args.device == "cpu" else 1)
    params = dict(job_name="perfsuite-sweep", time=limit, partition=args.partition,
                  gpus_per_task=gpus, cpus_per_task=args.cpus_per_task,
                  array_parallelism=args.array_parallelism,
                  additional_parameters=slurm_options(args.slurm_option) or None)  # fmt: skip
    executor.update_parameters(**{k: v for k, v in params.items() if v is not None})
    return executor


def _submitted(args: argparse.Namespace, submit: Any) -> Any:
    """``submit()``, with sbatch's refusal as one line (its stderr's first)."""
    from submitit.core.utils import FailedJobError, FailedSubmissionError

    chatter = io.StringIO()  # submitit echoes sbatch's stderr: said once, below
    try:
        with contextlib.redirect_stderr(chatter), contextlib.redirect_stdout(chatter):
            return submit()
    except (FailedJobError, FailedSubmissionError, OSError) as err:
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), repr(err))
        where = f" (--partition {args.partition})" if args.partition else ""
        raise PlanError(
            f"sbatch refused the job array{where}: {first}; nothing was submitted"
        ) from None


def _failure(job: Any) -> str | None:
    """None for a task that returned, else why not, in one line."""
    err = job.exception()
    if err is None:
        return None
    trace = str(err).split("-" * 22)
    lines = [ln.strip() for ln in trace[1].splitlines() if ln.strip()] if len(trace) > 2 else []
    if lines:  # the task raised: the traceback's last line names the exception
        return re.sub(r"^(?:\w+\.)+(?=\w+: )", "", lines[-1]) + f" (log {job.paths.stderr})"
    state = "" if job.state == "FINISHED" else f"{job.state}: "  # local: the controller's
    return f"no result ({state}killed, out of memory or past --time-limit?); log {job.paths.stderr}"


def _run_array(array: ArraySweep, console: Any) -> dict[int, str]:
    """Submit the shards to do and wait for them; the failures, shard -> reason."""
    args, n = array.args, array.n
    executor = _executor(array)
    queue = list(array.todo)
    running: dict[int, Any] = {}
    failed: dict[int, str] = {}

    def task(i: int) -> tuple[argparse.Namespace, tuple[int, int], str]:
        return args, (i, n), str(part_path(array.parts, i, n).resolve())

    if args.executor == "slurm":  # one sbatch: Slurm runs --array-parallelism at a time
        columns = [list(c) for c in zip(*map(task, queue), strict=True)]
        jobs = _submitted(args, lambda: executor.map_array(run_shard, *columns))
        running, queue = dict(zip(queue, jobs, strict=True)), []
        console.print(f"submitted Slurm array {jobs[0].job_id.split('_')[0]}; logs: {array.logs}")
    parallel = args.array_parallelism or 1
    try:
        while queue or running:
            while queue and len(running) < parallel:  # local: a wave at a time
                i = queue.pop(0)
                running[i] = executor.submit(run_shard, *task(i))
            for i, job in list(running.items()):
                if not job.done():
                    continue
                del running[i]
                reason = _failure(job)
                if reason is None:
                    console.print(f"shard {i}/{n}: done ({job.result()['rows']} rows)")
                else:
                    failed[i] = reason
                    console.print(f"[red]shard {i}/{n} failed:[/red] {reason}", soft_wrap=True)
            time.sleep(0.2 if args.executor == "local" else 5)
    except KeyboardInterrupt:  # the tasks stop too; their finished cells stay in the parts
        for job in running.values():
            job.cancel(check=False)
        raise
    return failed


def run(args: argparse.Namespace) -> int:
    """``perfsuite sweep``: in this process, or as a job array with ``--executor``."""
    from perfsuite.fit import TrimmedConsole

    if args.executor is None:
        if _given(args, CLUSTER_ONLY):
            raise PlanError(f"{', '.join(_given(args, CLUSTER_ONLY))}: need --executor")
        from perfsuite.run import sweep

        return sweep.run(args)
    console = TrimmedConsole(stderr=True, log_path=False)
    array = ArraySweep(args)
    try:
        console.print(
            f"sweep: {len(array.units)} cells (method x case) in {array.n} shards, "
            f"{array.kept} already measured; {len(array.todo)} shard(s) to submit "
            f"({args.executor}) → {array.out}",
            soft_wrap=True,
        )
        failed = _run_array(array, console) if array.todo else {}
        try:
            document = array.assemble(failed)
        except (MergeError, ResultsError) as err:
            why = f"{str(err).splitlines()[0]}; they are kept: see `perfsuite merge --help`"
            console.print(f"[red]error:[/red] cannot merge {array.parts}: {why}", soft_wrap=True)
            return 1
        write_results(array.out, document)
    finally:
        array.writer.release()
    if not failed:
        return ended(document, array.out, console)
    console.print(f"results: {array.out} ({status_counts(document['rows']) or 'no'} rows)")
    console.print(
        f"[red]error:[/red] {len(failed)} of {len(array.todo)} shard(s) failed "
        f"({', '.join(f'{i}/{array.n}' for i in sorted(failed))}); the others' cells are "
        "in --out: fix the cause, then the same command with --resume resubmits the rest",
        soft_wrap=True,
    )
    return 1
