"""Each case's rows marked with the machine's state over the case (``measure.machine``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfsuite.measure.machine import Watch

ProgressFn = Callable[[str, dict[str, Any], list[dict[str, Any]]], None]
MEASURED = ("ok", "wrong")


def busy_label(method: str, case: dict[str, Any]) -> str:
    """How a case is named in the machine's state groups (not a shape: its fields)."""
    if not {"tokens", "vocab", "hidden", "dtype", "beta"} <= case.keys():
        return " ".join([method, *(f"{k}={v}" for k, v in case.items())])
    tp = f" TP={case['tp']}" if case.get("tp") else ""
    size = f"N={case['tokens']} V={case['vocab']} D={case['hidden']}"
    return f"{method}{tp} {size} {case['dtype']} β={case['beta']:g}"


def watched(
    device: str, progress: ProgressFn | None, machine: list[dict[str, Any]] | None
) -> ProgressFn:
    """``progress`` that first marks each measured case's rows in place (``busy``: the
    reasons, "" when quiet) and appends the case's state to ``machine``."""
    watch = Watch(device)

    def marked(method: str, case: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        if any(r["status"] in MEASURED for r in rows):  # a worker measured it
            state = watch.end(busy_label(method, case))
            for row in rows:
                row["busy"] = "; ".join(state["busy"])
            if machine is not None:
                machine.append(state)
        if progress is not None:
            progress(method, case, rows)

    return marked
