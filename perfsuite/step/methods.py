"""The losses one training step is measured with: every declared method with a ``step``
(``perfsuite.method.StepPatch``), as the step kind sees it."""

from __future__ import annotations

from typing import Any

from perfsuite.method import Case, SimpleMethod, missing_packages
from perfsuite.plan.plan import PlanError, parse_list
from perfsuite.plan.registry import methods_for
from perfsuite.step.presets import get_preset

DTYPES = ("fp32", "bf16")


def availability(method: SimpleMethod, device: str) -> str | None:
    """None when ``method``'s step can run on ``device`` here, else why not."""
    reason = method.lacks("step") or method.availability(device)
    missing = missing_packages(*method.step.requires) if method.step else []
    return reason or (f"{', '.join(missing)} not installed" if missing else None)


def case_reason(method: SimpleMethod, case: dict[str, Any]) -> str | None:
    """Why ``method`` cannot compute a step case as asked (None: it can)."""
    p = get_preset(case["shape"])
    c = Case(1, p.vocab, p.hidden, case["dtype"], case["beta"], p.softcap, case["device"])
    return method.unsupported_reason(c)


def resolve(text: str | None) -> list[str]:
    """Method names from ``--methods`` (default: all), in table order."""
    known = methods_for("step")
    if text is None:
        return list(known)
    names = parse_list(text, "methods")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise PlanError(
            f"--methods: unknown method(s) {', '.join(unknown)}; known: {', '.join(known)}"
        )
    return [n for n in known if n in names]
