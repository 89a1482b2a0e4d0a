"""The losses one training step is measured with: every declared method with a ``step``
(``perfsuite.method.StepPatch``), as the step kind sees it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfsuite.method import Case, SimpleMethod, missing_packages
from perfsuite.plan.plan import PlanError, parse_list
from perfsuite.plan.registry import methods_for
from perfsuite.step.presets import get_preset

DTYPES = ("fp32", "bf16")


@dataclass(frozen=True)
class StepMethod:
    """A declared method (``decl``) as a step measures it."""

    decl: SimpleMethod

    @property
    def name(self) -> str:
        return self.decl.name

    @property
    def triton(self) -> bool:
        """Triton kernels: on CPU they run under TRITON_INTERPRET=1 (timings flagged †)."""
        return self.decl.caps.triton

    @property
    def holds(self) -> str:
        return self.decl.step.holds if self.decl.step else "none"

    def availability(self, device: str) -> str | None:
        """None when the method can run on ``device`` here, else why not."""
        reason = self.decl.lacks("step") or self.decl.availability(device)
        missing = missing_packages(*self.decl.step.requires) if self.decl.step else []
        return reason or (f"{', '.join(missing)} not installed" if missing else None)

    def case_reason(self, case: dict[str, Any]) -> str | None:
        """Why the method cannot compute a step case as asked (None: it can)."""
        p = get_preset(case["shape"])
        c = Case(1, p.vocab, p.hidden, case["dtype"], case["beta"], p.softcap, case["device"])
        return self.decl.unsupported_reason(c)


def step_methods() -> dict[str, StepMethod]:
    """Name -> every method that declares a step, in table order."""
    return {name: StepMethod(m) for name, m in methods_for("step").items()}


def __getattr__(name: str) -> Any:
    # ``METHODS``: read when asked, so that plugins set after import are seen.
    if name == "METHODS":
        return step_methods()
    raise AttributeError(name)


def resolve(text: str | None) -> list[str]:
    """Method names from ``--methods`` (default: all), in table order."""
    known = step_methods()
    if text is None:
        return list(known)
    names = parse_list(text, "methods")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise PlanError(
            f"--methods: unknown method(s) {', '.join(unknown)}; known: {', '.join(known)}"
        )
    return [n for n in known if n in names]
