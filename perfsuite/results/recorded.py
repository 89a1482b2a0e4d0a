"""What a results file records of its methods, for readers that should not import them
(every method's module, and torch with them): whether each computes its gradients in the
forward at each β (the tables' ‡)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


def _beta_key(beta: float) -> str:
    return repr(float(beta))


def grads_in_forward_record(
    methods: dict[str, Any], names: Iterable[str], betas: Iterable[float]
) -> dict[str, dict[str, bool]]:
    """``caps.grads_in_forward_at(β)`` of each method and β of a run, kept in its results'
    ``env.grads_in_forward``."""
    return {n: {_beta_key(b): methods[n].caps.grads_in_forward_at(b) for b in betas} for n in names}


@dataclass(frozen=True)
class _Recorded:
    """A method as its results file recorded it: its ``caps.grads_in_forward_at`` only."""

    by_beta: dict[str, bool]

    @property
    def caps(self) -> _Recorded:
        return self

    def grads_in_forward_at(self, beta: float) -> bool:
        return self.by_beta[_beta_key(beta)]


def recorded_methods(document: dict[str, Any]) -> dict[str, Any] | None:
    """``document``'s methods as its record answers ``caps.grads_in_forward_at``, when the
    record covers every row's method and β; else None (older files, files merged from
    different plans: ask the methods themselves)."""
    record = document["env"].get("grads_in_forward") or {}
    if not all(_beta_key(r["beta"]) in record.get(r["method"], {}) for r in document["rows"]):
        return None
    return {name: _Recorded(by_beta) for name, by_beta in record.items()}
