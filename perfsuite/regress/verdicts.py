"""``compare``'s verdict per cell (``cells.cell_key``): time by threshold and a one-sided
Mann-Whitney U test, memory by peak growth; the verdicts and why: docs/regressions.md."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfsuite.measure.stats import mann_whitney_greater_many, min_p_value, summarize
from perfsuite.results.cells import cell_key
from perfsuite.results.results import CELL_KEY

# The time threshold per device kind is what `perfsuite sensitivity` measured there: on CPU
# the smallest that kept false alarms <= 1 % (reports/sensitivity); on an H100 with locked
# clocks 2 % (reports/nvidia-h100-80gb-hbm3/sensitivity-cuda.json).
DEFAULT_TIME_THRESHOLDS = {"cpu": 0.20, "cuda": 0.02}
DEFAULT_MEMORY_THRESHOLD = 0.01
DEFAULT_ALPHA = 0.01
# /proc RSS high-water marks move in pages and malloc arenas: about 256 KiB.
CPU_MEMORY_SLACK_BYTES = 1 << 20
METRICS = ("median", "mean", "min", "p20", "p80")

VERDICTS = ("regression", "status-changed", "missing", "improvement", "new", "same")
BAD_NEW_STATUSES = frozenset({"wrong", "oom", "error"})


class CompareError(ValueError):
    """Two documents that cannot be compared (exit code 2)."""


def method_label(method: str, tp: int | None) -> str:
    """``ours``, or ``ours TP=2`` for a cell measured across 2 ranks (tp None: one device)."""
    return method if tp is None else f"{method} TP={tp}"


@dataclass(frozen=True)
class Settings:
    # None: DEFAULT_TIME_THRESHOLDS for the row's device.
    time_threshold: float | None = None
    memory_threshold: float = DEFAULT_MEMORY_THRESHOLD
    metric: str = "median"
    alpha: float = DEFAULT_ALPHA
    allow_env_mismatch: bool = False

    def threshold_for(self, device: str) -> float:
        default = DEFAULT_TIME_THRESHOLDS.get(device, DEFAULT_TIME_THRESHOLDS["cuda"])
        return default if self.time_threshold is None else self.time_threshold


@dataclass
class Decision:
    """A time or a memory verdict: regression / improvement / same; None: not compared."""

    verdict: str | None
    ratio: float | None = None
    p_slower: float | None = None
    note: str = ""


def classify_time(
    ratio: float, p_slower: float, p_faster: float, threshold: float, alpha: float
) -> str:
    """The decision rule itself: practical threshold AND statistical test."""
    if ratio >= 1 + threshold and p_slower < alpha:
        return "regression"
    if ratio <= 1 / (1 + threshold) and p_faster < alpha:
        return "improvement"
    return "same"


def compare_time(
    base_samples: Sequence[float],
    cur_samples: Sequence[float],
    settings: Settings,
    *,
    base_value: float | None = None,
    cur_value: float | None = None,
    device: str = "cuda",
) -> Decision:
    """Time verdict for two sample sets (``*_value``: fallbacks without samples)."""
    b = summarize(base_samples, settings.metric) if base_samples else base_value
    c = summarize(cur_samples, settings.metric) if cur_samples else cur_value
    if b is None or c is None or not (b > 0 and math.isfinite(c)):
        return Decision(None, note="no time to compare")
    ratio = c / b
    n1, n2 = len(cur_samples), len(base_samples)
    if min_p_value(n1, n2) >= settings.alpha:
        few = f"too few samples ({n2} vs {n1}) for a test at alpha={settings.alpha:g}"
        return Decision("same", ratio, note=few)
    pairs = [(cur_samples, base_samples), (base_samples, cur_samples)]
    p_slower, p_faster = mann_whitney_greater_many(pairs)
    threshold = settings.threshold_for(device)
    verdict = classify_time(ratio, p_slower, p_faster, threshold, settings.alpha)
    note = ""
    if verdict == "same" and ratio >= 1 + threshold:
        note = f"slower but not significant (p={p_slower:.2g})"
    elif verdict == "same" and p_slower < settings.alpha and ratio > 1:
        note = "significantly slower, below the threshold"
    return Decision(verdict, ratio, p_slower, note)


def compare_memory(base: int | None, cur: int | None, device: str, settings: Settings) -> Decision:
    if base is None or cur is None:
        return Decision(None)
    slack = CPU_MEMORY_SLACK_BYTES if device == "cpu" else 0
    ratio = cur / base if base > 0 else (1.0 if cur == base else math.inf)
    margin = settings.memory_threshold * max(base, 0) + slack
    if cur > base + margin:
        return Decision("regression", ratio)
    if cur < base - margin:
        return Decision("improvement", ratio)
    return Decision("same", ratio)


@dataclass
class CellComparison:
    baseline: dict[str, Any] | None
    current: dict[str, Any] | None
    verdict: str
    failing: bool
    time: Decision = field(default_factory=lambda: Decision(None))
    memory: Decision = field(default_factory=lambda: Decision(None))
    notes: list[str] = field(default_factory=list)

    @property
    def row(self) -> dict[str, Any]:
        """The row that names the cell: the current one, else the baseline's."""
        return self.current or self.baseline or {}


def compare_cell(
    base: dict[str, Any] | None,
    cur: dict[str, Any] | None,
    settings: Settings,
    *,
    unavailable: str = "",
) -> CellComparison:
    """One cell's verdict; ``unavailable``: why CURRENT cannot run the cell's method."""
    if base is None:
        assert cur is not None
        return CellComparison(None, cur, "new", False)
    if cur is None:  # a run that measured less must not pass the gate
        notes = [f"unavailable: {unavailable}"] if unavailable else ["not in the current run"]
        return CellComparison(base, None, "missing", not unavailable, notes=notes)
    if base["status"] != cur["status"]:
        fails = base["status"] == "ok" or cur["status"] in BAD_NEW_STATUSES
        notes = [cur["reason"]] if cur["status"] != "ok" and cur.get("reason") else []
        return CellComparison(base, cur, "status-changed", fails, notes=notes)
    if cur["status"] != "ok":
        return CellComparison(base, cur, "same", False)

    timed = [bool(r.get("samples_ms")) or r.get("median_ms") is not None for r in (base, cur)]
    if timed == [True, False] and not cur.get("interpreted"):
        # An ok cell that lost its time is a broken run, never "same".
        return CellComparison(base, cur, "regression", True, notes=["ok but no time was recorded"])
    device = cur.get("device", "cpu")
    if base.get("interpreted") or cur.get("interpreted"):
        time = Decision(None, note="interpreted: time not compared")
    else:
        time = compare_time(
            base.get("samples_ms") or [],
            cur.get("samples_ms") or [],
            settings,
            base_value=base.get("median_ms"),
            cur_value=cur.get("median_ms"),
            device=device,
        )
    notes = [time.note] if time.note else []
    memory = compare_memory(base.get("peak_bytes"), cur.get("peak_bytes"), device, settings)
    verdicts = {time.verdict, memory.verdict}
    verdict = next((v for v in ("regression", "improvement") if v in verdicts), "same")
    if verdicts == {"regression", "improvement"}:
        notes.append(f"{'memory' if memory.verdict == 'improvement' else 'time'} improved")
    return CellComparison(base, cur, verdict, verdict == "regression", time, memory, notes)


def index_rows(rows: Iterable[dict[str, Any]], label: str) -> dict[tuple, dict[str, Any]]:
    cells: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        key = cell_key(row)
        if key in cells:
            pairs = zip(KEY_FIELDS, key, strict=True)
            desc = ", ".join(f"{k}={v}" for k, v in pairs if not (k == "tp" and v is None))
            raise CompareError(f"{label}: the cell ({desc}) appears twice")
        cells[key] = row
    return cells


# ``cells.cell_key``'s order: CELL_KEY, then the workload, the TP size and the timer.
KEY_FIELDS = (*CELL_KEY, "workload", "tp", "timer")


def _values(values: set[Any]) -> str:
    return ",".join(sorted("-" if v is None else f"{v:g}" if isinstance(v, float) else str(v)
                           for v in values))  # fmt: skip


def tp_sizes(values: set[Any]) -> str:
    """``one device, TP=2`` (tp None: no process group), for messages."""
    ordered = sorted(values, key=lambda v: v or 0)  # one device first
    return ", ".join("one device" if v is None else f"TP={v}" for v in ordered)


def _nothing_shared(base: dict[tuple, Any], cur: dict[tuple, Any], labels: tuple[str, str]) -> str:
    """Why two documents share no cell, field by field (TP sizes when either has any)."""
    differ = []
    tp = KEY_FIELDS.index("tp")
    for i, name in enumerate(KEY_FIELDS):
        b, c = {k[i] for k in base}, {k[i] for k in cur}
        if name not in ("phase", "tp") and not b & c:
            differ.append(f"{name} {_values(b)} in {labels[0]} but {_values(c)} in {labels[1]}")
            if name == "timer":
                differ[-1] += ": cells timed differently are never compared"
    b_tp, c_tp = {k[tp] for k in base}, {k[tp] for k in cur}
    if b_tp != {None} or c_tp != {None}:
        joint = "but" if not b_tp & c_tp else "and"
        differ.append(
            f"TP size {tp_sizes(b_tp)} in {labels[0]} {joint} {tp_sizes(c_tp)} in {labels[1]}"
            + (": cells of different TP sizes are never compared" if joint == "but" else "")
        )
    why = "; ".join(differ) or "no method, shape, β and phase measured in both"
    return f"nothing to compare: no cell is in both files ({why})"


@dataclass
class Comparison:
    cells: list[CellComparison]
    settings: Settings
    env_problems: list[str] = field(default_factory=list)
    env_warnings: list[str] = field(default_factory=list)
    baseline_label: str = "baseline"
    current_label: str = "current"
    notes: list[str] = field(default_factory=list)

    def count(self, verdict: str) -> int:
        return sum(c.verdict == verdict for c in self.cells)

    @property
    def failures(self) -> list[CellComparison]:
        return [c for c in self.cells if c.failing]


# Versions that do not change what is measured: the suite itself (the code under test lives
# in the rows' methods) and its table/dataframe libraries.
IGNORED_VERSIONS = frozenset({"perfsuite", "pandas", "rich"})


def env_differences(base_env: dict[str, Any], cur_env: dict[str, Any]) -> tuple[list, list]:
    """(blocking problems, warnings) between a baseline's environment and a run's."""
    problems, warnings = [], []
    bdev, cdev = base_env.get("device") or {}, cur_env.get("device") or {}
    for key in ("kind", "name", "cuda"):
        if bdev.get(key) != cdev.get(key) and (key != "cuda" or bdev.get("kind") == "cuda"):
            problems.append(f"device {key}: {bdev.get(key)!r} (baseline) vs {cdev.get(key)!r}")
    bver, cver = base_env.get("versions") or {}, cur_env.get("versions") or {}
    for name in sorted((set(bver) & set(cver)) - IGNORED_VERSIONS):
        if bver[name] != cver[name]:
            problems.append(f"{name} version: {bver[name]} (baseline) vs {cver[name]}")
    only = sorted((set(bver) ^ set(cver)) - IGNORED_VERSIONS)
    warnings += [f"{name}: recorded in only one of the two results" for name in only]
    if bdev.get("driver") != cdev.get("driver"):
        warnings.append(f"GPU driver: {bdev.get('driver')!r} (baseline) vs {cdev.get('driver')!r}")
    if base_env.get("python") != cur_env.get("python"):
        warnings.append(f"python: {base_env.get('python')} (baseline) vs {cur_env.get('python')}")
    if (cur_env.get("git") or {}).get("dirty"):
        warnings.append("current results come from a checkout with uncommitted changes")
    return problems, warnings


def compare_documents(
    baseline: dict[str, Any],
    current: dict[str, Any],
    settings: Settings | None = None,
    baseline_label: str = "baseline",
    current_label: str = "current",
) -> Comparison:
    """Verdict per cell; ``CompareError`` for another environment unless the settings allow it."""
    settings = settings or Settings()
    problems, warnings = env_differences(baseline.get("env") or {}, current.get("env") or {})
    if problems and not settings.allow_env_mismatch:
        raise CompareError(
            f"the two results were measured in different environments ({'; '.join(problems)}): "
            "compare results of the same device and versions, or pass --allow-env-mismatch"
        )
    base_cells = index_rows(baseline["rows"], baseline_label)
    cur_cells = index_rows(current["rows"], current_label)
    for label, rows in ((current_label, cur_cells), (baseline_label, base_cells)):
        if not rows:  # a run that produced nothing passes no gate
            raise CompareError(f"nothing to compare: {label} has no rows")
    if not base_cells.keys() & cur_cells.keys():
        raise CompareError(_nothing_shared(base_cells, cur_cells, (baseline_label, current_label)))
    unavailable = {
        (r["method"], r.get("tp")): str(r.get("reason") or "").strip()
        for r in cur_cells.values()
        if r["status"] == "unavailable"
    }
    cells = []
    for k in [*base_cells, *(k for k in cur_cells if k not in base_cells)]:
        why = unavailable.get((k[0], k[KEY_FIELDS.index("tp")]), "")  # (method, TP size)
        cells.append(compare_cell(base_cells.get(k), cur_cells.get(k), settings, unavailable=why))
    return Comparison(cells, settings, problems, warnings, baseline_label, current_label)
