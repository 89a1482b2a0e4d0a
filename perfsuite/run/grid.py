"""The grid of a sweep: its (method, case) units in a fixed order, shards of them, and
what each costs."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from perfsuite.plan.plan import Plan, PlanError
from perfsuite.plan.shapes import Shape
from perfsuite.plan.workloads import workload_label
from perfsuite.results.cells import cell_key


@dataclass
class Unit:
    """One (method, case) of the grid: a worker measures all its phases together."""

    index: int  # position in the whole grid (shards are index % n)
    method: str
    case: dict[str, Any]


def unit_keys(unit: Unit, phases: list[str]) -> list[tuple]:
    label = workload_label(unit.case.get("workload"))
    return [
        cell_key({**unit.case, "method": unit.method, "phase": p, "workload": label})
        for p in phases
    ]


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
        for n, v, d in itertools.product(tokens, vocab, hidden)
    ]


def grid_units(plan: Plan, shard: tuple[int, int] | None = None) -> list[Unit]:
    """Every (method, case) in a fixed order, or shard i of n: every n-th of them, so
    that each shard gets a fair share of the large shapes and of every method."""
    units = [
        Unit(i, method, case)
        for i, (method, case) in enumerate((m, c) for m in plan.methods for c in plan.cases())
    ]
    if shard is None:
        return units
    i, n = shard
    return [u for u in units if u.index % n == i]
