"""Each case's rows marked with the machine's state over the case (``perfsuite.measure.machine``):
the runner's progress callback, wrapped."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from perfsuite.measure.machine import Watch

ProgressFn = Callable[[str, dict[str, Any], list[dict[str, Any]]], None]
MEASURED = ("ok", "wrong")


def watched(
    device: str,
    progress: ProgressFn | None,
    machine: list[dict[str, Any]] | None,
    keys: Sequence[str],
) -> tuple[ProgressFn, dict[tuple, str]]:
    """``progress`` that first marks each measured case's rows (``busy``: the reasons,
    "" when quiet) and appends the case's state to ``machine``; also the marks by
    case key, for the rows the runner returns."""
    watch = Watch(device)
    busy: dict[tuple, str] = {}

    def marked(method: str, case: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        if any(r["status"] in MEASURED for r in rows):  # a worker measured it
            tp = f" TP={case['tp']}" if case.get("tp") else ""
            label = f"{method}{tp} N={case['tokens']} V={case['vocab']} D={case['hidden']}"
            state = watch.end(f"{label} {case['dtype']} β={case['beta']:g}")
            reasons = "; ".join(state["busy"])
            busy[tuple(case.get(k) for k in keys)] = reasons
            for row in rows:
                row["busy"] = reasons
            if machine is not None:
                machine.append(state)
        if progress is not None:
            progress(method, case, rows)

    return marked, busy
