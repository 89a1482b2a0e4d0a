"""Compare two kernel reports build by build (on kernel, variant, config, dtype, arch; equal
SASS hashes: the same code). One of ours fails on a new spill, fewer CTAs per SM, or an
instruction class or the total grown past the threshold (registers alone never fail); CCE's
builds, builds across Triton versions and a retuned config are reported, never failing."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_THRESHOLD = 0.05

# (label, row key, unit): resources and occupancy (a unit: never gated on growth), then
# the instruction classes (sass.counts; no unit: gated on growth), the total last.
COUNTS = (
    ("registers", "registers", ""),
    ("spill stores", "spill_store_bytes", " B"),
    ("spill loads", "spill_load_bytes", " B"),
    ("smem", "shared_bytes", " B"),
    ("TMEM", "tmem_cols", " cols"),
    ("CTAs/SM", "ctas_per_sm", ""),
    *((label, label.lower(), None) for label in ("HGMMA", "HMMA", "UTCMMA", "LDTM", "LDGSTS")),
    *((label, label.lower(), None) for label in ("MEMBAR", "CAS", "EXCH")),
    ("atomic adds", "atomic_adds", None),
    ("NANOSLEEP", "nanosleep", None),
    ("TMA loads", "tma_loads", None),
    ("TMA stores", "tma_stores", None),
    ("TC in lock", "critical_tensor_ops", None),
    ("instructions", "instructions", None),
)
_KEY = ("kernel", "variant", "config", "dtype", "arch")


def where(row: dict[str, Any], config: bool = True) -> str:
    """A build's name, as the report's failures name it."""
    cfg = f" {row['config']}" if config else ""
    return f"{row['kernel']}[{row['variant']}]{cfg} {row['dtype']} {row['arch']}"


@dataclass
class Change:
    """One build whose code changed: what moved, and what would fail it."""

    build: str
    changes: list[str]
    reasons: list[str] = field(default_factory=list)
    why_not_gated: str = ""  # "" for our builds at the same Triton and config

    @property
    def fails(self) -> bool:
        return bool(self.reasons) and not self.why_not_gated

    @property
    def verdict(self) -> str:
        if self.why_not_gated:
            worse = f"; would fail: {', '.join(self.reasons)}" if self.reasons else ""
            return f"not gated ({self.why_not_gated}){worse}"
        return f"FAIL: {', '.join(self.reasons)}" if self.reasons else "ok"


@dataclass
class Comparison:
    threshold: float
    across_triton: bool = False
    unchanged: int = 0
    changed: list[Change] = field(default_factory=list)
    only_in_this_run: list[str] = field(default_factory=list)
    only_in_baseline: list[str] = field(default_factory=list)

    def failing(self) -> list[Change]:
        return [c for c in self.changed if c.fails]

    def as_dict(self) -> dict[str, Any]:
        changed = [{**vars(c), "verdict": c.verdict, "fails": c.fails} for c in self.changed]
        return {**asdict(self), "changed": changed}


def changes(old: dict[str, Any], new: dict[str, Any], threshold: float) -> tuple[list, list]:
    """(what moved, why it fails) between two builds of one launch."""
    if not new.get("ok", True):
        return ["did not build"], ["did not build"]
    if not old.get("ok", True):
        return ["builds now (the baseline's did not)"], []
    moved, reasons = [], []
    for label, key, unit in COUNTS:
        a, b = old.get(key), new.get(key)
        if a is None or b is None or a == b:
            continue
        growth = f" ({(b - a) / a:+.1%})" if a else ""
        moved.append(f"{label} {a} → {b}{growth if unit is None else unit}")
        if key.startswith("spill") and b > a:
            reasons.append(f"new {label[:-1]}" if a == 0 else f"more {label}")
        if key == "ctas_per_sm" and b < a:
            reasons.append("fewer CTAs/SM")
        if unit is None and b > a * (1 + threshold):
            reasons.append(f"{label} {(b - a) / a:+.1%}" if a else f"new {label}")
    if not moved:
        moved.append("other SASS, same counts")
    return moved, reasons


def compare(
    old_rows: list[dict[str, Any]],
    new_rows: list[dict[str, Any]],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    across: bool = False,
) -> Comparison:
    """``new_rows`` (this run) against ``old_rows`` (the baseline), build by build."""
    out = Comparison(threshold, across)
    old = {tuple(r[k] for k in _KEY): r for r in old_rows}
    new = {tuple(r[k] for k in _KEY): r for r in new_rows}
    for key, row in new.items():
        if (base := old.get(key)) is None:
            continue
        if row.get("ok") and base.get("ok", True) and row.get("sass_hash") == base.get("sass_hash"):
            out.unchanged += 1
            continue
        moved, reasons = changes(base, row, threshold)
        ungated = "across Triton versions" if across else ""
        ungated = ungated if row.get("ours", True) else "CCE's"
        out.changed.append(Change(where(row), moved, reasons, ungated))
    gone = [r for k, r in old.items() if k not in new]
    _pair_retuned(gone, [r for k, r in new.items() if k not in old], out)
    return out


def _by_launch(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(where(r, config=False), []).append(r)
    return out


def _pair_retuned(gone: list[dict], added: list[dict], out: Comparison) -> None:
    """A launch with one build only in the baseline and one only in this run changed its
    config: compared as one build, never failing (a new tile is an intended change);
    every other build on one side only is listed."""
    by_new = _by_launch(added)
    for name, olds in _by_launch(gone).items():
        news = by_new.get(name, [])
        if len(olds) == 1 and len(news) == 1:
            a, b = olds[0], news.pop()
            moved, reasons = changes(a, b, out.threshold)
            config = f"config {a['config']} → {b['config']}"
            out.changed.append(Change(name, [config, *moved], reasons, "config changed"))
        else:
            out.only_in_baseline += [where(r) for r in olds]
    out.only_in_this_run += [where(r) for rows in by_new.values() for r in rows]
