"""Input checks that read tensor values, inside the custom op (op.py) where the compiler
does not trace. Off the CPU a host read would be a sync (and break CUDA graph capture), so
there the check is a queued ``torch._assert_async``."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch


def _check(bad: torch.Tensor, message: Callable[[], str]) -> None:
    """``ValueError(message())`` where any of ``bad`` holds: eagerly on CPU or with
    ``PERFSUITE_DEBUG=1`` (a sync), else a device assert at the next sync."""
    if bad.device.type == "cpu" or os.environ.get("PERFSUITE_DEBUG", "0") == "1":
        if bool(bad.any()):
            raise ValueError(message())
    else:
        torch._assert_async(~bad.any())


def check_targets_in_range(targets: torch.Tensor, vocab: int, ignore_index: int) -> None:
    """Every target in [0, vocab) or ``ignore_index``."""
    bad = (targets != ignore_index) & ((targets < 0) | (targets >= vocab))
    _check(
        bad,
        lambda: (
            f"targets out of range: {targets[bad][0].item()} not in [0, {vocab}) and not "
            f"ignore_index={ignore_index}"
        ),
    )


def check_weight_values(weight: torch.Tensor | None) -> None:
    """Class weights finite and ≥ 0."""
    if weight is not None:
        bad = ~torch.isfinite(weight) | (weight < 0)
        _check(bad, lambda: "weight must be finite and >= 0 (a negative class weight)")
