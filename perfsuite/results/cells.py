"""What makes two rows the same measurement, the order a sweep writes rows in, and when
two results' environments measured comparably: for whatever joins results documents."""

from __future__ import annotations

from typing import Any

from perfsuite.results.kinds import PHASES, STEP_PHASES, TRAIN_PHASES, cell_key

__all__ = ["ORDER", "canonical_order", "cell_key", "env_differences"]

# Phases in table order: a loss cell's, then a training step's (perfsuite step).
ORDER = list(dict.fromkeys((*PHASES, *STEP_PHASES, *TRAIN_PHASES)))


def canonical_order(rows: list[dict[str, Any]], plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows in the order an uninterrupted sweep writes them (method, N, V, D, dtype, β as
    the plan lists them, phase), so a merged or resumed file renders the same table."""

    def rank(values: list[Any], value: Any) -> tuple[int, Any]:
        return (values.index(value), "") if value in values else (len(values), str(value))

    methods, dtypes, betas = plan.get("methods", []), plan.get("dtypes", []), plan.get("betas", [])
    return sorted(
        rows,
        key=lambda r: (
            rank(methods, r["method"]),
            r.get("tp") or 0,
            r["tokens"],
            r["vocab"],
            r["hidden"],
            rank(dtypes, r["dtype"]),
            rank(betas, r["beta"]),
            str(r.get("workload")),
            str(r.get("softcap")),
            rank(ORDER, r["phase"]),
        ),
    )


ENV_MUST_AGREE = (
    ("device", "kind"), ("device", "name"),
    # Uncommitted changes are other code: a dirty tree never agrees with a clean one,
    # and two dirty ones only with the same changes (``diff``, when both recorded it).
    ("git", "sha"), ("git", "dirty"), ("git", "diff"),
    ("plan", "samples"), ("plan", "warmup"), ("plan", "seed"), ("plan", "phases"),
)  # fmt: skip


def env_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What makes two results' measurements incomparable: device, code, versions, method."""
    out = []
    for section, key in ENV_MUST_AGREE:
        va, vb = ((env.get(section) or {}).get(key) for env in (a, b))
        if va is not None and vb is not None and va != vb:
            out.append(f"{section}.{key}: {va!r} vs {vb!r}")
    versions_a, versions_b = a.get("versions") or {}, b.get("versions") or {}
    for name in sorted(set(versions_a) & set(versions_b)):
        if versions_a[name] != versions_b[name]:
            out.append(f"{name} version: {versions_a[name]} vs {versions_b[name]}")
    return out
