"""``perfsuite sweep``'s command line: its arguments, the plan and grid they ask for, and
what ``--resume`` may read back (a sweep of the same grid)."""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Any

from perfsuite.args import (
    add_measurement_arguments,
    add_out_arguments,
    measurement_options,
    out_file,
    positive_float,
)
from perfsuite.plan.plan import Plan, PlanError, build_plan, parse_ints
from perfsuite.plan.shapes import Shape
from perfsuite.results.results import STATUSES, load_results

DEFAULT_TOKENS = "1024,4096,8192"
DEFAULT_VOCAB = "32768,128256,256000"
DEFAULT_HIDDEN = "2048,4096"

# ``ok`` would measure the whole sweep again: that is a new --out.
REDO_STATUSES = tuple(s for s in STATUSES if s != "ok")
# The plan's fields that decide which cells a sweep holds (with its shapes' N, V, D).
_GRID_FIELDS = ("methods", "dtypes", "betas", "phases", "softcap", "workload", "tps")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", default=None, help=f"N values (default {DEFAULT_TOKENS})")
    p.add_argument("--vocab", default=None, help=f"V values (default {DEFAULT_VOCAB})")
    p.add_argument("--hidden", default=None, help=f"D values (default {DEFAULT_HIDDEN})")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--softcap", type=positive_float, help="apply this logit softcap to every cell")
    add_measurement_arguments(p)
    add_out_arguments(p, "sweep-<device>.json", force=None)
    p.add_argument("--resume", action="store_true", help="finish the sweep in --out")
    p.add_argument(
        "--redo", default="", help="with --resume: statuses to measure again, e.g. error,oom"
    )
    add_attempt_all(
        p, "(and, with --resume, skipped ones and a file measured under another environment)"
    )
    p.add_argument("--shard", help="i/n: run every n-th cell starting at i (0-based)")
    p.add_argument("--gpus", help="all, or GPU indices (0,1): one worker per GPU at a time")


def add_attempt_all(p: argparse.ArgumentParser, also: str) -> None:
    """``run``'s and ``sweep``'s ``--attempt-all`` (not ``--force``: "overwrite --out")."""
    text = f"attempt cells the memory model predicts will not fit {also}"
    p.add_argument("--attempt-all", action="store_true", help=text)


def plan_from_args(args: argparse.Namespace) -> tuple[Plan, dict[str, Any]]:
    """The sweep's Plan and the grid as asked, from parsed arguments."""
    # torch: loaded once the arguments are checked
    from perfsuite.plan.workloads import WorkloadError, file_info, parse_workload

    try:
        workload = parse_workload(args.workload, args.entropy, args.zipf)
    except WorkloadError as err:
        raise PlanError(str(err)) from None
    tokens_text, vocab_text, hidden_text = args.tokens, args.vocab, args.hidden
    softcap = args.softcap
    if workload and workload["kind"] == "file":
        info = file_info(workload, vocab_text, hidden_text)
        tokens_text = tokens_text or str(info["tokens"])
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
        shapes=[
            Shape(f"n{n}-v{v}-d{d}", n, v, d, dtype=args.dtype)
            for n, v, d in itertools.product(grid["tokens"], grid["vocab"], grid["hidden"])
        ],
        dtype=args.dtype,
        softcap=softcap,
        workload=workload,
        **measurement_options(args),
        check_memory=False,
    )
    grid.update(beta=plan.betas, dtype=args.dtype, methods=plan.methods)
    if plan.tps:
        grid["tp"] = plan.tps
    return plan, grid


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


def parse_redo(text: str, resume: bool) -> tuple[str, ...]:
    """``--redo error,oom``: statuses to measure again, only with ``--resume``."""
    redo = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    unknown = [s for s in redo if s not in REDO_STATUSES]
    if unknown:
        raise PlanError(
            f"--redo {text}: {unknown[0]!r} is not a status to measure again "
            f"(choose from {', '.join(REDO_STATUSES)})"
        )
    if redo and not resume:
        raise PlanError(f"--redo {text} retries cells of a sweep being resumed: add --resume")
    return redo


def _grid_of(plan: dict[str, Any]) -> dict[str, Any]:
    shapes = [s for s in plan.get("shapes") or [] if isinstance(s, dict)]
    grid: dict[str, Any] = {
        name: sorted({s.get(name) for s in shapes}, key=str)
        for name in ("tokens", "vocab", "hidden")
    }
    grid["shapes"] = sorted((s.get("tokens"), s.get("vocab"), s.get("hidden")) for s in shapes)
    for name in _GRID_FIELDS:
        value = plan.get(name)
        grid[name] = sorted(value, key=str) if isinstance(value, list) else value
    return grid


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join("x".join(map(str, v)) if isinstance(v, tuple) else f"{v}" for v in value)
    return "none" if value is None else str(value)


def grid_differences(previous: dict[str, Any], plan: dict[str, Any]) -> list[str]:
    """What differs between the grid a file's ``env.plan`` describes and ``plan``'s."""
    before, now = _grid_of(previous), _grid_of(plan)
    differ = [k for k in now if before[k] != now[k]]
    if {"tokens", "vocab", "hidden"} & set(differ):  # else: other shapes of the same N, V, D
        differ.remove("shapes")
    return [f"{k} {_show(before[k])} there, {_show(now[k])} here" for k in differ]


def load_resumable(path: Path, plan: dict[str, Any]) -> dict[str, Any]:
    """The results file ``--resume`` reads back, refused unless a sweep of ``plan``'s grid."""
    document = load_results(path, empty=True)  # a sweep stopped before its first cell
    if not isinstance(document["env"].get("sweep"), dict):
        raise PlanError(
            f"--resume {path}: not a sweep's results file (a `run` or `step` made it); "
            "give the --out of the sweep to finish, or a new file"
        )
    diffs = grid_differences(document["env"].get("plan") or {}, plan)
    if diffs:
        raise PlanError(
            f"--resume {path}: a sweep of another grid ({'; '.join(diffs)}); resume it with "
            "its own arguments, or give a new --out (`perfsuite merge` joins the two)"
        )
    return document


def out_path(args: argparse.Namespace, name: str) -> Path:
    """``--out``, or a new file (``args.out_file``); ``--resume`` needs ``--out``."""
    if args.resume and args.out is None:
        raise PlanError("--resume needs --out: the results file of the sweep to finish")
    return out_file(args.out, "sweep", name)


def check_resume(out: Path, resume: bool, parts: bool = False) -> None:
    """``out`` exists when resumed (unless an array's ``parts`` hold it), never else."""
    if out.exists() and not resume:
        raise PlanError(f"{out} exists: pass --resume to finish that sweep, or another --out")
    if resume and not parts and not out.exists():  # a typo would start a whole new sweep
        raise PlanError(f"--resume {out}: no such file, nothing to resume")
