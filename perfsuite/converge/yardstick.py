"""Eager's own rounding noise, the yardstick a method's distance from eager is read
against (``parity``; docs/converge.md): training amplifies last-bit differences, so every
sweep also trains eager's loss rounded otherwise: in fp32 ``eager-reordered`` (the tokens
summed in two halves), in 16 bit ``reference`` (fp32 logits on the same model). Both are
declared methods (baselines/torch_methods.py), as every method is."""

from __future__ import annotations

REORDERED = "eager-reordered"
FP32_LOGITS = "reference"


def yardstick_for(dtype: str) -> str:
    """The method whose distance from eager is eager's own noise in ``dtype``."""
    return REORDERED if dtype == "fp32" else FP32_LOGITS
