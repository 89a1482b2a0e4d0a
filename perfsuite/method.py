"""What a method is: a named way to compute the smoothed linear cross-entropy.

A method declares what it can do (``Capabilities``) and says why it cannot run
here (``availability``) instead of crashing or, worse, quietly computing another
loss. The suite asks every method for exactly one thing: given a ``Case`` and
the classifier ``c``, a callable ``loss_fn(e, c, targets) -> scalar`` equal to
``F.cross_entropy(softcap(e.float() @ c.float().T), targets,
label_smoothing=beta, ignore_index=-100, reduction="mean")``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import torch

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}

LossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class Unsupported(Exception):
    """Raised by ``Method.prepare`` for a case the method cannot compute as asked."""


class Unavailable(Exception):
    """Raised by ``Method.prepare`` when a package or device turns out to be missing."""


@dataclass(frozen=True)
class Case:
    """One problem to compute: shape, dtype, smoothing, softcap, device."""

    tokens: int
    vocab: int
    hidden: int
    dtype: str = "bf16"
    beta: float = 0.0
    softcap: float | None = None
    device: str = "cpu"
    ignore_index: int = -100
    # Training terms (issue 22): PaLM's z_loss·lse² per valid row, and class weights
    # (``class_weights(case)``: deterministic, F.cross_entropy(weight=...) semantics).
    z_loss: float = 0.0
    class_weights: bool = False

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


def class_weights(case: Case, device: torch.device | str) -> torch.Tensor | None:
    """The case's class weights, fp32 (V,): uniform in [0.5, 1.5), every 10th class 0
    (as padding or banned ids are), from a fixed seed; None when the case has none."""
    if not case.class_weights:
        return None
    generator = torch.Generator().manual_seed(1234)
    weight = torch.rand(case.vocab, generator=generator) + 0.5
    weight[::10] = 0.0
    return weight.to(device)


@dataclass(frozen=True)
class LossTerms:
    """Terms a method variant always computes (``ours-zloss``): applied to each case."""

    z_loss: float = 0.0
    class_weights: bool = False

    def apply(self, case: Case) -> Case:
        return replace(case, z_loss=self.z_loss, class_weights=self.class_weights)


@dataclass(frozen=True)
class Capabilities:
    """What a method supports; the runner checks a case against it before running."""

    label_smoothing: bool = False
    softcap: bool = False
    devices: frozenset[str] = frozenset({"cpu", "cuda"})
    dtypes: frozenset[str] = frozenset(DTYPES)
    ignore_index: bool = True
    # Gradients are produced inside the forward call (Liger, torch's chunked
    # path): its fwd/bwd split is not comparable, fwd+bwd is the fair column.
    grads_in_forward: bool = False
    # Triton kernels: on CPU they run under TRITON_INTERPRET=1, so their
    # timings there say nothing about GPU speed.
    triton: bool = False
    # Holds the N x V logits (the memory the in-house kernel avoids).
    materializes_logits: bool = True
    # At beta > 0 a plain materialised path runs instead (torch's chunked
    # F.linear_cross_entropy falls back to full logits): no gradients in forward there.
    smoothing_falls_back: bool = False
    # z_loss·lse² and class weights (torch's cross_entropy semantics).
    z_loss: bool = False
    class_weights: bool = False
    # Relative cost of one call under the Triton interpreter; the runner starts
    # the costliest interpreted methods first so parallel workers end together.
    interpreter_cost: float = 1.0

    def grads_in_forward_at(self, beta: float) -> bool:
        """Whether the case's forward call computes the gradients (see the field)."""
        return self.grads_in_forward and not (beta > 0 and self.smoothing_falls_back)

    def describe(self) -> str:
        parts = [
            "smoothing" if self.label_smoothing else "no smoothing",
            "softcap" if self.softcap else "no softcap",
            "/".join(sorted(self.devices)),
            "/".join(d for d in DTYPES if d in self.dtypes),
        ]
        if self.grads_in_forward:
            parts.append("grads in fwd" + (" at β=0" if self.smoothing_falls_back else ""))
        if self.triton:
            parts.append("triton")
        return ", ".join(parts)


def missing_packages(*modules: str) -> list[str]:
    """Import names among ``modules`` that are not installed (without importing them)."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def package_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


class Method(Protocol):
    """The interface every method implements (see ``SimpleMethod``)."""

    name: str
    description: str
    caps: Capabilities
    # Distributions whose versions belong in the results' provenance.
    distributions: tuple[str, ...]
    # Shown as a row only when asked for by name (the fp32 reference).
    timed_by_default: bool

    def availability(self, device: str) -> str | None:
        """``None`` if the method can run on ``device`` here, else the reason it cannot."""

    def unsupported_reason(self, case: Case) -> str | None:
        """``None`` if the method computes ``case`` exactly as asked, else why not."""

    def prepare(self, case: Case, c: torch.Tensor) -> LossFn:
        """Untimed set-up (module construction, compilation hooks); returns the loss callable."""


@dataclass
class SimpleMethod:
    """A method built from a ``prepare`` function plus declared capabilities.

    ``requires`` lists import names checked (not imported) for availability;
    ``extra_check`` adds a device/version specific reason.
    """

    name: str
    description: str
    build: Callable[[Case, torch.Tensor], LossFn]
    caps: Capabilities = field(default_factory=Capabilities)
    requires: tuple[str, ...] = ()
    distributions: tuple[str, ...] = ()
    timed_by_default: bool = True
    extra_check: Callable[[str], str | None] | None = None
    # A variant that always adds these terms (the worker applies them to each case).
    terms: LossTerms | None = None

    def availability(self, device: str) -> str | None:
        missing = missing_packages(*self.requires)
        if missing:
            return f"{', '.join(missing)} not installed"
        if device not in self.caps.devices:
            return f"needs {' or '.join(sorted(self.caps.devices))}, not {device}"
        if device == "cuda" and not torch.cuda.is_available():
            return "no CUDA device"
        if self.extra_check is not None:
            return self.extra_check(device)
        return None

    def unsupported_reason(self, case: Case) -> str | None:
        return capability_gap(self.caps, case)

    def prepare(self, case: Case, c: torch.Tensor) -> LossFn:
        reason = self.unsupported_reason(case)
        if reason is not None:
            raise Unsupported(reason)
        return self.build(case, c)


def capability_gap(caps: Capabilities, case: Case) -> str | None:
    """Why ``caps`` cannot compute ``case`` exactly, or ``None``."""
    if case.beta > 0 and not caps.label_smoothing:
        return f"no label smoothing (asked beta={case.beta:g})"
    if case.softcap is not None and not caps.softcap:
        return f"no softcap (asked softcap={case.softcap:g})"
    if case.dtype not in caps.dtypes:
        return f"no {case.dtype} support"
    if case.z_loss and not caps.z_loss:
        return f"no z-loss (asked z_loss={case.z_loss:g})"
    if case.class_weights and not caps.class_weights:
        return "no class weights"
    return None
