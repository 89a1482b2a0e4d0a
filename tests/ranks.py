"""Ranks forked from one fresh launcher (torch.multiprocessing): nothing of pytest's
(no threads, no process group), and the modules every rank needs imported once, in the
launcher, not in each rank (seconds apiece on 2 cores)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

import torch.multiprocessing as mp


def _launch(
    _: int, worker: Callable, world: int, args: tuple, preload: Sequence[str], first: Any
) -> None:
    if first is not None:
        first()
    for name in preload:
        with suppress(ImportError):  # a missing package: the worker skips what needs it
            importlib.import_module(name)
    mp.start_processes(worker, (world, *args), nprocs=world, join=True, start_method="fork")


def fork_ranks(
    worker: Callable[..., None],
    world: int,
    args: tuple[Any, ...],
    preload: Sequence[str] = (),
    first: Callable[[], None] | None = None,
) -> None:
    """``worker(rank, world, *args)`` on ``world`` ranks forked from a spawned launcher
    that runs ``first`` (a module-level function) and imports ``preload``; a rank's
    failure ends the others and raises here."""
    mp.spawn(_launch, args=(worker, world, args, preload, first), nprocs=1, join=True)
