"""Input checks that read tensor values, inside the custom op (op.py) where the compiler
does not trace. Off the CPU a host read would be a sync (and break CUDA graph capture), so
there the check is a queued ``torch._assert_async``."""

from __future__ import annotations

import os

import torch


def _debug() -> bool:
    return os.environ.get("PERFSUITE_DEBUG", "0") == "1"


def queued(device: torch.device) -> bool:
    """Whether the checks on ``device`` are queued device asserts (not eager host checks):
    then they may come after the forward's launch, which reads no target unmasked."""
    return device.type != "cpu" and not _debug()


def check_targets_in_range(targets: torch.Tensor, vocab: int, ignore_index: int) -> None:
    """Range check: eager on CPU, else a device assert at the next sync, unless
    ``PERFSUITE_DEBUG=1`` (a sync, then ``ValueError`` at once)."""
    bad = (targets != ignore_index) & ((targets < 0) | (targets >= vocab))
    if not queued(targets.device):
        if bool(bad.any()):
            first = targets[bad][0].item()
            raise ValueError(
                f"targets out of range: {first} not in [0, {vocab}) and not ignore_index="
                f"{ignore_index}"
            )
    else:
        torch._assert_async(~bad.any())


def check_weight_values(weight: torch.Tensor | None) -> None:
    """Class weights finite and ≥ 0: eagerly on CPU (or PERFSUITE_DEBUG=1), else a device
    assert."""
    if weight is None:
        return
    bad = ~torch.isfinite(weight) | (weight < 0)
    if not queued(weight.device):
        if bool(bad.any()):
            raise ValueError("weight must be finite and >= 0 (a negative class weight)")
    else:
        torch._assert_async(~bad.any())
