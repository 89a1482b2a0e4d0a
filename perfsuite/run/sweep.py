"""``perfsuite sweep``: a grid over (tokens, vocab, hidden, β), resumable and shardable.

The grid is a ``Plan`` (one shape per (N, V, D)); its cells run through
``runner.run_method``, so isolation and statuses are exactly ``run``'s. On top:

- **predicted fit**: a (method, case) whose predicted peak
  (``memory_model.predicted_peak``) exceeds the device is not attempted
  but recorded as ``skipped`` with the reason, unless ``--force``;
- **incremental, atomic writes**: the results file is rewritten (temp file +
  rename) after every finished case, so a killed sweep loses only the cases in
  flight; ``--resume`` reads it back and runs only the cells it lacks
  (``skipped`` cells are predicted again; ``--redo error,oom`` retries those);
- **shards**: ``--shard i/n`` takes every n-th (method, case) of the grid in a
  fixed order, so n jobs (a Slurm array, a CI matrix) cover it exactly once and
  ``perfsuite merge`` joins their files;
- **several GPUs**: ``--gpus all`` (or ``0,2``) runs one worker per GPU at a
  time, each pinned with ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from perfsuite.args import add_measurement_arguments, measurement_options
from perfsuite.method import Case
from perfsuite.plan.memory_model import device_capacity, predicted_peak
from perfsuite.plan.plan import Plan, PlanError, build_plan
from perfsuite.plan.registry import all_methods
from perfsuite.plan.shapes import Shape
from perfsuite.plan.workloads import WorkloadError, file_info, parse_workload, workload_label
from perfsuite.results.results import (
    CELL_KEY,
    PHASES,
    Row,
    load_results,
    new_document,
    write_results,
)

DEFAULT_TOKENS = "1024,4096,8192"
DEFAULT_VOCAB = "32768,128256,256000"
DEFAULT_HIDDEN = "2048,4096"
DEFAULT_OUT_DIR = Path("reports") / "runs"

# (method, case dict, rows of that case) after every finished or skipped case.
CellFn = Callable[["Unit", list[dict[str, Any]]], None]


@dataclass
class Unit:
    """One (method, case) of the grid: a worker measures all its phases together."""

    index: int  # position in the whole grid (shards are index % n)
    method: str
    case: dict[str, Any]


def cell_key(row: dict[str, Any]) -> tuple:
    """``CELL_KEY`` plus the workload: what makes two rows the same measurement."""
    return (*(row.get(k) for k in CELL_KEY), row.get("workload") or "random")


def unit_keys(unit: Unit, phases: list[str]) -> list[tuple]:
    label = workload_label(unit.case.get("workload"))
    return [
        cell_key({**unit.case, "method": unit.method, "phase": p, "workload": label})
        for p in phases
    ]


def parse_ints(text: str, what: str) -> list[int]:
    values = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        try:
            value = int(item)
        except ValueError:
            raise PlanError(f"--{what}: {item!r} is not an integer") from None
        if value <= 0:
            raise PlanError(f"--{what}: must be positive, got {value}")
        values.append(value)
    if not values:
        raise PlanError(f"--{what} is empty")
    return sorted(set(values))


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"i/n"`` with 0 <= i < n, or None."""
    if text is None:
        return None
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise PlanError(f"--shard: expected i/n (e.g. 0/4), got {text!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise PlanError(f"--shard {text}: need 0 <= i < n")
    return i, n


def parse_gpus(text: str | None, device: str) -> list[str]:
    """``--gpus all|N,M``: the GPU indices to run one worker on each."""
    if text is None:
        return []
    if device != "cuda":
        raise PlanError("--gpus needs --device cuda (or auto on a machine with GPUs)")
    if text == "all":
        import torch

        count = torch.cuda.device_count()
        if count == 0:
            raise PlanError("--gpus all: torch sees no GPU")
        return [str(i) for i in range(count)]
    gpus = [g.strip() for g in text.split(",") if g.strip()]
    if not gpus or not all(g.isdigit() for g in gpus):
        raise PlanError(f"--gpus: expected all or indices like 0,1, got {text!r}")
    return list(dict.fromkeys(gpus))


def grid_shapes(tokens: list[int], vocab: list[int], hidden: list[int], dtype: str) -> list[Shape]:
    return [
        Shape(f"n{n}-v{v}-d{d}", n, v, d, dtype=dtype)
        for n in tokens
        for v in vocab
        for d in hidden
    ]


def grid_units(plan: Plan, shard: tuple[int, int] | None = None) -> list[Unit]:
    """Every (method, case) in a fixed order, or shard i of n: every n-th of them.

    Round-robin (not contiguous blocks) so each shard gets a fair share of the
    large shapes and of every method.
    """
    units = [
        Unit(i, method, case)
        for i, (method, case) in enumerate((m, c) for m in plan.methods for c in plan.cases())
    ]
    if shard is None:
        return units
    i, n = shard
    return [u for u in units if u.index % n == i]


def canonical_order(rows: list[dict[str, Any]], plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows in the order an unsharded, uninterrupted sweep writes them (method, then
    N, V, D, dtype, β as the plan lists them, then phase), so a merged or resumed
    file renders the same table."""

    def rank(values: list[Any], value: Any) -> tuple[int, Any]:
        return (values.index(value), "") if value in values else (len(values), str(value))

    methods, dtypes, betas = plan.get("methods", []), plan.get("dtypes", []), plan.get("betas", [])
    return sorted(
        rows,
        key=lambda r: (
            rank(methods, r["method"]),
            r["tokens"],
            r["vocab"],
            r["hidden"],
            rank(dtypes, r["dtype"]),
            rank(betas, r["beta"]),
            str(r.get("workload")),
            str(r.get("softcap")),
            PHASES.index(r["phase"]),
        ),
    )


def unit_cost(unit: Unit, plan: Plan, interpreted: bool) -> float:
    """Relative cost of a unit for the progress bar's time estimate: matmul FLOPs of
    the correctness gate and of every sample, plus a fixed cost per case."""
    c = unit.case
    nvd = c["tokens"] * c["vocab"] * c["hidden"]
    per_phase = {"fwd": 2, "bwd": 6, "fwd+bwd": 8}
    samples = (min(plan.samples, 3) + 1) if interpreted else (plan.samples + plan.warmup + 1)
    flops = nvd * (24 + sum(per_phase[p] for p in plan.phases) * samples)
    return (flops * (50 if interpreted else 1)) + 1e10


def skip_reason(unit: Unit, capacity: int | None, known: dict[str, Any]) -> str | None:
    """Why the unit is predicted not to fit, or None (attempt it)."""
    if capacity is None:
        return None
    method = known[unit.method]
    c = unit.case
    case = Case(**{k: v for k, v in c.items() if k not in ("shape", "workload")})
    if method.availability(case.device) is not None or method.unsupported_reason(case):
        return None  # the worker says why, cheaply and more usefully
    need, what = predicted_peak(
        unit.method,
        method.caps.materializes_logits,
        c["tokens"],
        c["vocab"],
        c["hidden"],
        c["dtype"],
        softcap=c.get("softcap") is not None,
    )
    if need <= capacity:
        return None
    return (
        f"predicted peak ~{need / 2**30:.1f} GiB ({what}) exceeds the "
        f"{capacity / 2**30:.1f} GiB this {c['device']} can give a cell (memory model, "
        "math.md); --force attempts it"
    )


def skipped_rows(unit: Unit, plan: Plan, reason: str) -> list[dict[str, Any]]:
    c = unit.case
    fields = {
        k: c[k]
        for k in ("shape", "tokens", "vocab", "hidden", "dtype", "beta", "softcap", "device")
    }
    return [
        asdict(
            Row(
                method=unit.method,
                phase=p,
                status="skipped",
                reason=reason,
                workload=workload_label(c.get("workload")),
                **fields,
            )
        )
        for p in plan.phases
    ]


ENV_MUST_AGREE = (
    ("device", "kind"),
    ("device", "name"),
    ("git", "sha"),
    ("plan", "samples"),
    ("plan", "warmup"),
    ("plan", "seed"),
    ("plan", "phases"),
)


def env_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What makes two results' measurements incomparable: device, code, versions, method."""
    out = []
    for path in ENV_MUST_AGREE:
        va, vb = a, b
        for part in path:
            va = va.get(part) if isinstance(va, dict) else None
            vb = vb.get(part) if isinstance(vb, dict) else None
        if va is not None and vb is not None and va != vb:
            out.append(f"{'.'.join(path)}: {va!r} vs {vb!r}")
    versions_a, versions_b = a.get("versions") or {}, b.get("versions") or {}
    for name in sorted(set(versions_a) & set(versions_b)):
        if versions_a[name] != versions_b[name]:
            out.append(f"{name} version: {versions_a[name]} vs {versions_b[name]}")
    return out


def _collect_env(plan: Plan) -> dict[str, Any]:
    from perfsuite.results.provenance import collect_env

    methods = all_methods()
    distributions = [d for name in plan.methods for d in methods[name].distributions]
    env = collect_env(plan.device, distributions)
    env["plan"] = plan.as_dict()
    return env


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
        env = _collect_env(plan)
        rows: list[dict[str, Any]] = []
        resumed: list[dict[str, Any]] = []
        if self.out.exists():
            if not resume:
                raise PlanError(
                    f"{self.out} exists: pass --resume to finish that sweep, or another --out"
                )
            previous = load_results(self.out)
            diffs = env_differences(previous["env"], env)
            if diffs and not force:
                raise PlanError(
                    f"{self.out} was measured under another environment ({'; '.join(diffs)}); "
                    "resume it where it was made, use another --out, or --force"
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
        with self.lock:
            self.document["rows"].extend(rows)
        self.save()

    def run(self, on_cell: CellFn | None = None) -> dict[str, Any]:
        known = all_methods()
        capacity = None if self.force else device_capacity(self.plan.device, self.plan.memory_limit)
        pending: list[Unit] = []
        skipped: list[dict[str, Any]] = []
        for unit in self.todo:
            reason = skip_reason(unit, capacity, known)
            if reason is None:
                pending.append(unit)
                continue
            rows = skipped_rows(unit, self.plan, reason)
            skipped.extend(rows)
            if on_cell is not None:
                on_cell(unit, rows)
        self.document["rows"].extend(skipped)
        self.save()
        self._execute(pending, on_cell)
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
        from perfsuite.run.runner import run_method, run_parallel, schedule

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

            run_method(self.plan, method, [u.case for u in units], progress, env=slot)

        def on_free_slot(item: tuple[str, list[Unit]]) -> None:
            slot = free.get()
            try:
                measure(item, slot)
            finally:
                free.put(slot)

        batches = self._batches(pending)
        if len(self.slots) == 1:  # one device: runner's order (interpreted ones in parallel)
            only = self.slots[0]
            schedule(self.plan, batches, lambda item: item[0], lambda item: measure(item, only))
            return
        run_parallel(batches, on_free_slot, len(self.slots))


# ---------------------------------------------------------------------------
# Command line


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", default=None, help=f"N values (default {DEFAULT_TOKENS})")
    p.add_argument("--vocab", default=None, help=f"V values (default {DEFAULT_VOCAB})")
    p.add_argument("--hidden", default=None, help=f"D values (default {DEFAULT_HIDDEN})")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--softcap", type=float, help="apply this logit softcap to every cell")
    add_measurement_arguments(p)
    p.add_argument("--out", type=Path, help=f"results file (default: {DEFAULT_OUT_DIR}/…)")
    p.add_argument("--resume", action="store_true", help="finish the sweep in --out")
    p.add_argument(
        "--redo", default="", help="with --resume: statuses to measure again, e.g. error,oom"
    )
    p.add_argument("--force", action="store_true", help="attempt cells predicted not to fit")
    p.add_argument("--shard", help="i/n: run every n-th cell starting at i (0-based)")
    p.add_argument("--gpus", help="all, or GPU indices (0,1): one worker per GPU at a time")


def plan_from_args(args: argparse.Namespace) -> tuple[Plan, dict[str, Any]]:
    """The sweep's Plan and the grid as asked, from parsed arguments."""
    try:
        workload = parse_workload(args.workload, args.entropy, args.zipf)
    except WorkloadError as err:
        raise PlanError(str(err)) from None
    tokens_text, vocab_text, hidden_text = args.tokens, args.vocab, args.hidden
    softcap = args.softcap
    if workload and workload["kind"] == "file":
        info = file_info(workload)
        tokens_text = tokens_text or str(info["tokens"])
        if vocab_text or hidden_text:
            raise PlanError("a file workload fixes V and D; sweep only --tokens (up to its N)")
        vocab_text, hidden_text = str(info["vocab"]), str(info["hidden"])
        softcap = softcap if softcap is not None else info["softcap"]
        if max(parse_ints(tokens_text, "tokens")) > info["tokens"]:
            raise PlanError(f"--tokens: {workload['path']} holds only N={info['tokens']} rows")
    grid = {
        "tokens": parse_ints(tokens_text or DEFAULT_TOKENS, "tokens"),
        "vocab": parse_ints(vocab_text or DEFAULT_VOCAB, "vocab"),
        "hidden": parse_ints(hidden_text or DEFAULT_HIDDEN, "hidden"),
    }
    plan = build_plan(
        shapes=grid_shapes(grid["tokens"], grid["vocab"], grid["hidden"], args.dtype),
        dtype=args.dtype,
        softcap=softcap,
        workload=workload,
        **measurement_options(args),
        check_memory=False,
    )
    grid.update(beta=plan.betas, dtype=args.dtype, methods=plan.methods)
    return plan, grid


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    try:
        plan, grid = plan_from_args(args)
        shard = parse_shard(args.shard)
        gpus = parse_gpus(args.gpus, plan.device)
        if args.resume and args.out is None:
            raise PlanError("--resume needs --out: the results file of the sweep to finish")
        out = args.out
        if out is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            part = "" if shard is None else f"-shard{shard[0]}of{shard[1]}"
            out = DEFAULT_OUT_DIR / f"{stamp}-sweep-{plan.device}{part}.json"
        redo = tuple(s.strip() for s in args.redo.split(",") if s.strip())
        sweep = Sweep(
            plan,
            out,
            shard=shard,
            resume=args.resume,
            force=args.force,
            redo=redo,
            slots=[{"CUDA_VISIBLE_DEVICES": g} for g in gpus] or None,
            grid=grid,
        )
    except (PlanError, WorkloadError, ValueError) as err:
        console.print(f"[red]error:[/red] {err}")
        return 2
    known = all_methods()
    interpreted = {m: plan.device == "cpu" and known[m].caps.triton for m in plan.methods}
    costs = {u.index: unit_cost(u, plan, interpreted[u.method]) for u in sweep.todo}
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
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("sweep", total=total_cost, cells=f"0/{len(sweep.todo)} cells")

        def on_cell(unit: Unit, rows: list[dict[str, Any]]) -> None:
            nonlocal done
            done += 1
            statuses = ",".join(sorted({r["status"] for r in rows}))
            c = unit.case
            bar.console.log(
                f"{unit.method:<20} N={c['tokens']} V={c['vocab']} D={c['hidden']} "
                f"β={c['beta']:g}: {statuses}"
            )
            bar.update(
                task,
                advance=costs.get(unit.index, 0.0),
                description=unit.method,
                cells=f"{done}/{len(sweep.todo)} cells",
            )

        document = sweep.run(on_cell)
    counts: dict[str, int] = {}
    for row in document["rows"]:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    console.print(f"results: {out} ({summary} rows)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="perfsuite sweep", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
