"""A step case (model, size, dtype, β, device) as the dict a worker receives, and the
rows that record it: one per step phase, in ``perfsuite.results``' schema."""

from __future__ import annotations

from typing import Any

from perfsuite.method import SimpleMethod
from perfsuite.results.results import STEP_PHASES, Row
from perfsuite.step.presets import Size, StepPreset

# What identifies a case in a row (the busy-machine marks are keyed by it).
CASE_KEYS = ("shape", "dtype", "beta", "workload")


def make_case(preset: StepPreset, size: Size, dtype: str, beta: float, device: str) -> dict:
    """The worker's case; tokens/vocab/hidden ride along for the progress lines."""
    return {
        "shape": preset.name,
        "layers": size.layers,
        "seq": size.seq,
        "batch": size.batch,
        "dtype": dtype,
        "beta": beta,
        "device": device,
        "tokens": size.tokens,
        "vocab": preset.vocab,
        "hidden": preset.hidden,
        "workload": size.label(),
        "softcap": preset.softcap,
    }


def case_size(case: dict[str, Any]) -> Size:
    return Size(layers=case["layers"], seq=case["seq"], batch=case["batch"])


def case_rows(case: dict[str, Any], method: SimpleMethod, **fields: Any) -> list[Row]:
    """One row per step phase of ``case``, with ``fields`` set (the step's N is
    batch x seq, V and D the model's: the loss-only cell of the same last layer)."""
    fields.setdefault("interpreted", method.caps.triton and case["device"] == "cpu")
    keys = ("tokens", "vocab", "hidden", "dtype", "beta", "softcap", "shape", "device", "workload")
    given = {k: case[k] for k in keys}
    return [Row(kind="step", method=method.name, phase=p, **given, **fields) for p in STEP_PHASES]
