"""A results row's cell as every table and plot writes it: how rows group into tables, what
a cell without numbers says, the marks a measured cell carries (‡ † ≈ ! ✗) and what they mean."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from perfsuite.plan.registry import all_methods
from perfsuite.results.recorded import recorded_methods
from perfsuite.results.results import PHASES
from perfsuite.units import SHORT_STATUS

GRADS_IN_FWD_MARK = "‡"
INTERPRETED_MARK = "†"
WRONG_MARK = "✗"
# Two fwd+bwd calls on the same inputs gave different bits (atomics, locks, split-K).
NONDETERMINISTIC_MARK = "≈"
BUSY_MARK = "!"
CLOCK_MARK = "↓"
# A row whose samples ran at a median SM clock below this share of its maximum is marked.
SLOW_CLOCK = 0.95


def one_device(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows measured on one device (``tp`` None): what the paper's tables hold."""
    return [r for r in rows if r.get("tp") is None]


def tp_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows measured across ranks."""
    return [r for r in rows if r.get("tp") is not None]


def tp_note(rows: Iterable[dict[str, Any]]) -> str:
    """What a one-device table says of ``rows``' cells across ranks ("" when none)."""
    across = tp_rows(rows)
    if not across:
        return ""
    sizes = ",".join(map(str, sorted({r["tp"] for r in across})))
    return (
        f"{len(across)} cells measured across ranks (TP={sizes}) are left out of "
        "these tables: the TP tables show them (per rank, max over ranks)."
    )


def shape_key(row: dict[str, Any]) -> tuple:
    """(N, V, D, dtype, softcap, workload): one paper table, β as its sections."""
    dims = (row[k] for k in ("tokens", "vocab", "hidden", "dtype", "softcap"))
    return (*dims, row.get("workload") or "random")


def group_rows(
    rows: Iterable[dict[str, Any]], key: Any = lambda r: (*shape_key(r), r["beta"])
) -> dict[Any, list]:
    """Rows grouped by ``key(row)`` (default: shape and β), in first-seen order."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    return groups


def shape_title(members: list[dict[str, Any]]) -> str:
    first = members[0]
    shape = first.get("shape") or "custom"
    softcap, workload = first["softcap"], first.get("workload") or "random"
    cap = "" if softcap is None else f", softcap {softcap:g}"
    load = "" if workload == "random" else f", {workload} inputs"
    return (
        f"{shape}: N={first['tokens']} V={first['vocab']} D={first['hidden']} "
        f"{first['dtype']}{cap}{load}"
    )


def present_phases(members: list[dict[str, Any]]) -> list[str]:
    return [p for p in PHASES if any(r["phase"] == p for r in members)]


def by_method(members: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """method -> phase -> row, of one device's rows."""
    return {method: by_phase for (method, _), by_phase in by_cell(members).items()}


def by_cell(members: list[dict[str, Any]]) -> dict[tuple[str, int | None], dict[str, Any]]:
    """(method, TP size) -> phase -> row: methods in first-seen order, then TP sizes up."""
    order = {m: i for i, m in enumerate(dict.fromkeys(r["method"] for r in members))}
    cells = group_rows(members, key=lambda r: (order[r["method"]], r.get("tp")))
    return {
        (rows[0]["method"], rows[0].get("tp")): {r["phase"]: r for r in rows}
        for _, rows in sorted(cells.items())
    }


def status_label(row: dict[str, Any]) -> str:
    """What a cell without a measurement shows: N/A where the method does not apply."""
    return "N/A" if row["status"] == "unsupported" else row["status"]


def grads_in_forward(name: str, known: dict[str, Any] | None = None, beta: float = 0.0) -> bool:
    """Whether ``name``'s forward computes the gradients at this β (‡ in the tables)."""
    method = (all_methods() if known is None else known).get(name)
    return method is not None and method.caps.grads_in_forward_at(beta)


def known_methods(document: dict[str, Any]) -> dict[str, Any]:
    """The methods for ``grads_in_forward``: ``document``'s record where it covers every row
    (no torch), else the registry's."""
    return recorded_methods(document) or all_methods()


def measured(row: dict[str, Any]) -> bool:
    """Whether a cell has numbers to show: ``ok``, or ``wrong`` and timed anyway."""
    return row["status"] == "ok" or (row["status"] == "wrong" and row.get("median_ms") is not None)


def cell_marks(row: dict[str, Any], phase: str, grads_in_fwd: bool) -> str:
    """The marks of a measured cell (``MARK_NOTES`` says what each means)."""
    mark = GRADS_IN_FWD_MARK if grads_in_fwd and phase != "fwd+bwd" else ""
    mark += INTERPRETED_MARK if row.get("interpreted") else ""
    mark += NONDETERMINISTIC_MARK if row.get("deterministic") is False else ""
    mark += BUSY_MARK if row.get("busy") else ""
    mark += CLOCK_MARK if slow_clock(row) else ""
    return mark + (WRONG_MARK if row["status"] == "wrong" else "")


def slow_clock(row: dict[str, Any]) -> bool:
    """Whether a row's samples ran below ``SLOW_CLOCK`` of the GPU's top SM clock."""
    clocks = row.get("clocks")
    return bool(clocks) and clocks["sm_clock_mhz"] < SLOW_CLOCK * clocks["sm_clock_max_mhz"]


# Console words for cells without numbers: no longer than a number, so that the
# number columns stay narrow (the notes under the table say the rest).
STATUS_COLOR = dict(
    wrong="red", oom="magenta", error="red", unavailable="dim", skipped="yellow", unsupported="dim"
)


def status_cell(row: dict[str, Any]) -> str:
    """A cell's status in its colour (console markup), no wider than a number."""
    status = row["status"]
    return f"[{STATUS_COLOR[status]}]{SHORT_STATUS.get(status, status)}[/{STATUS_COLOR[status]}]"


# What each mark means, said once under the tables that carry it.
MARK_NOTES = {
    GRADS_IN_FWD_MARK: "computes gradients inside forward: its fwd/bwd split is not comparable, "
    "fwd+bwd is the fair column.",
    INTERPRETED_MARK: "Triton interpreter on CPU: timing says nothing about GPU speed; memory "
    "and correctness do count.",
    NONDETERMINISTIC_MARK: "not bit-deterministic: two fwd+bwd calls on the same inputs gave "
    "different loss or gradient bits.",
    BUSY_MARK: "measured on a busy machine (other processes on the cores, or a throttled or "
    "shared GPU): its time is not trustworthy; compare will not judge it.",
    CLOCK_MARK: "the GPU's SM clock fell below 95% of its top during the samples (a power cap "
    "or heat: the row's clocks say which); a time for that state, not for full clocks.",
    WRONG_MARK: "failed the correctness gate (see its note): timed, never counted best.",
}


def mark_notes(
    rows: list[dict[str, Any]], known: dict[str, Any] | None = None, kind: str = "loss"
) -> list[str]:
    """What each mark the rows carry means and, for the loss, how CPU memory was measured;
    ``known``: the methods (default: the registry's); another ``kind`` has no ‡."""
    known = all_methods() if known is None and kind == "loss" else known
    carried = {
        GRADS_IN_FWD_MARK: kind == "loss"
        and any(grads_in_forward(r["method"], known, r["beta"]) for r in rows),
        INTERPRETED_MARK: any(r.get("interpreted") for r in rows),
        NONDETERMINISTIC_MARK: any(r.get("deterministic") is False for r in rows),
        BUSY_MARK: any(r.get("busy") for r in rows),
        CLOCK_MARK: any(slow_clock(r) for r in rows),
        WRONG_MARK: any(r["status"] == "wrong" and measured(r) for r in rows),
    }
    notes = [f"{mark} {MARK_NOTES[mark]}" for mark, shown in carried.items() if shown]
    if kind == "loss" and next((r.get("device") for r in rows), None) == "cpu":
        notes.append(
            "CPU run: memory is what torch tensors hold at the peak (CPU allocator events), "
            "the CPU counterpart of CUDA's max_memory_allocated; process RSS is in the results."
        )
    return notes
