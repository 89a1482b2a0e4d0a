"""A method: ``build(case, c)(e, c, targets)`` computes the smoothed cross-entropy of
``softcap(e @ c.T)``, declared once with what it supports and why it cannot run here."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

LossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
# Cells a method is measured in: run, run --tp, step (a model's training step), converge.
KINDS = ("loss", "tp", "step", "train")


class Unsupported(Exception):
    """Raised by ``SimpleMethod.prepare`` for a case the method cannot compute as asked."""


class Unavailable(Exception):
    """Raised by ``SimpleMethod.prepare`` when a package or device turns out to be missing."""


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
    # Training terms: PaLM's z_loss·lse² per valid row; class weights (``class_weights``).
    z_loss: float = 0.0
    class_weights: bool = False

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


def class_weights(case: Case, device: torch.device | str) -> torch.Tensor | None:
    """The case's class weights (V,), every 10th 0 as padding or banned ids are; None if none."""
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


# What a loss holds at its peak beyond its inputs and their gradients: the N x V logits
# whole ("logits"; "compiled": fused by the compiler; "chunks": every chunk's logits kept),
# token chunks of them ("fused"), or none ("none": the slices or tiles of ours, CCE).
HOLDS = ("logits", "compiled", "chunks", "fused", "none")


@dataclass(frozen=True)
class Holds:
    """A method's one memory declaration, read by the one memory model for every kind:
    ``copies`` of the N x V logits in the input dtype, (without, with) softcap, where it holds
    them whole. Eager's: 4 and 7 (the paper's Gemma2-2B table: eager 28 GB ≈ 7 copies)."""

    kind: str = "logits"
    copies: tuple[float, float] = (4.0, 7.0)

    def __post_init__(self) -> None:
        if self.kind not in HOLDS:
            raise ValueError(f"Holds kind {self.kind!r}: one of {', '.join(HOLDS)}")

    @property
    def whole_logits(self) -> bool:
        """Whether the N x V logits are held whole (the memory ours avoids)."""
        return self.kind in ("logits", "compiled", "chunks")


@dataclass(frozen=True)
class Capabilities:
    """What a method supports; the runner checks a case against it before running."""

    label_smoothing: bool = False
    softcap: bool = False
    devices: frozenset[str] = frozenset({"cpu", "cuda"})
    dtypes: frozenset[str] = frozenset(DTYPES)
    # Gradients made in the forward call (Liger, torch's chunked path): fwd+bwd is the fair column.
    grads_in_forward: bool = False
    # Triton kernels: interpreted on a CPU, where their timings say nothing about GPU speed.
    triton: bool = False
    # What it holds at its peak (``Holds``): eager's N x V logits unless said otherwise.
    holds: Holds = Holds()
    # At beta > 0 a materialised path runs instead (torch-native's): no gradients in forward.
    smoothing_falls_back: bool = False
    # z_loss·lse² and class weights (torch's cross_entropy semantics).
    z_loss: bool = False
    class_weights: bool = False
    # Why it does not run on CPU (None: "needs cuda"), and why its softcap does not (Liger's).
    cpu_reason: str | None = None
    softcap_off_cpu: str | None = None
    # Relative cost of a call interpreted: the costliest start first, so workers end together.
    interpreter_cost: float = 1.0

    def grads_in_forward_at(self, beta: float) -> bool:
        """Whether the case's forward call computes the gradients (see the field)."""
        return self.grads_in_forward and not (beta > 0 and self.smoothing_falls_back)

    def describe(self) -> str:
        """``perfsuite methods``' capabilities cell."""
        parts = ["smoothing" if self.label_smoothing else "no smoothing"]
        parts.append("softcap" if self.softcap else "no softcap")
        parts += ["/".join(sorted(self.devices)), "/".join(d for d in DTYPES if d in self.dtypes)]
        if self.grads_in_forward:
            parts.append("grads in fwd" + (" at β=0" if self.smoothing_falls_back else ""))
        if self.triton:
            parts.append("triton")
        return ", ".join(parts)


def missing_packages(*modules: str) -> list[str]:
    """Import names among ``modules`` that are not installed (without importing them;
    a dotted name whose parent package is missing is missing too)."""

    def absent(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is None
        except ModuleNotFoundError:
            return True

    return [m for m in modules if absent(m)]


def imported(module: str, name: str | None = None, failed: str | None = None) -> Any:
    """``module`` (or its ``name``), imported as a method builds; any error at import (built
    for another torch or triton) is ``Unavailable``, said after ``failed``."""
    try:
        found = importlib.import_module(module)
        return found if name is None else getattr(found, name)
    except Exception as err:
        failed = failed or f"{module.partition('.')[0]} failed to import"
        raise Unavailable(f"{failed}: {type(err).__name__}: {err}") from err


def check_signature(fn: Callable[..., Any], names: str, against: str) -> None:
    """``Unavailable`` unless ``fn``'s leading parameters are ``names`` (space-separated): the
    library changed under the adapter (``against``: who was written against which version)."""
    expected, have = tuple(names.split()), tuple(inspect.signature(fn).parameters)
    if have[: len(expected)] != expected:
        raise Unavailable(
            f"{fn.__module__}.{fn.__name__}{have} differs from the signature {against}"
        )


def package_version(dist: str) -> str | None:
    """``dist``'s installed version, None when it is not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class StepPatch:
    """How a method trains a transformers model in ``perfsuite step``: ``patch(model, preset,
    beta) -> loss(ids)``, run in the worker; ``requires``: modules beyond the method's."""

    patch: Callable[[Any, Any, float], Callable[[torch.Tensor], torch.Tensor]]
    requires: tuple[str, ...] = ()


# The terms a case may ask for and a method may lack: what asks for one, and its words.
_ASKED: dict[str, tuple[Callable[[Case], bool], Callable[[Case], str]]] = {
    "label_smoothing": (lambda c: c.beta > 0, lambda c: f"asked beta={c.beta:g}"),
    "softcap": (lambda c: c.softcap is not None, lambda c: f"asked softcap={c.softcap:g}"),
    "z_loss": (lambda c: bool(c.z_loss), lambda c: f"asked z_loss={c.z_loss:g}"),
    "class_weights": (lambda c: c.class_weights, lambda c: ""),
}


@dataclass(frozen=True)
class AcrossRanks:
    """A method's loss across ranks (``run --tp``): ``build(case, c_shard, shard) -> loss_fn``
    on every rank, and only what differs there from its own declaration (``caps``: fields
    replaced; ``shard_check``: a layout it cannot compute exactly)."""

    build: Callable[[Case, torch.Tensor, Any], LossFn]
    description: str = ""
    caps: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)
    shard_check: Callable[[Case, Any], str | None] | None = None
    extra_check: Callable[[str], str | None] | None = None


@dataclass
class SimpleMethod:
    """A method's one declaration: its loss builder (``build``; None for a method measured
    only across ranks), capabilities, and its other kinds as hooks on it (``tp``, ``step``);
    docs/development.md, "Add a method (one file)"."""

    name: str
    description: str
    build: Callable[[Case, torch.Tensor], LossFn] | None = None
    caps: Capabilities = field(default_factory=Capabilities)
    requires: tuple[str, ...] = ()
    # Distributions whose versions go in the results' provenance (beyond CORE_DISTRIBUTIONS).
    distributions: tuple[str, ...] = ()
    # The pip requirements as tested, pinned: the lent GPU's wheels (.ci/gpu-wheels).
    pip: tuple[str, ...] = ()
    # Its row's name in the paper's table (render/report.py's --paper), if it has one.
    paper: str | None = None
    # False: a row only when asked for by name (the fp32 reference, ablations).
    timed_by_default: bool = True
    extra_check: Callable[[str], str | None] | None = None
    # A variant that always adds these terms (the worker applies them to each case).
    terms: LossTerms | None = None
    tp: AcrossRanks | None = None
    step: StepPatch | None = None
    compiles: bool = False
    # A term it lacks (label_smoothing, softcap, z_loss, class_weights) -> the library's own
    # reason, so a result says more than "no z-loss".
    limits: dict[str, str] = field(default_factory=dict)

    def across_ranks(self) -> SimpleMethod | None:
        """This method as ``run --tp`` measures it (its ``tp`` hook applied); None without one."""
        if (tp := self.tp) is None:
            return None
        return replace(
            self,
            description=tp.description or self.description,
            caps=replace(self.caps, **tp.caps),
            limits={**self.limits, **tp.limits},
            extra_check=tp.extra_check or self.extra_check,
        )

    @property
    def kinds(self) -> tuple[str, ...]:
        """The cell kinds this method declares (``KINDS``)."""
        has = {"loss": self.build, "tp": self.tp, "step": self.step, "train": self.build}
        return tuple(k for k in KINDS if has[k] is not None)

    def lacks(self, kind: str) -> str | None:
        """Why a ``kind`` cell of this method is unsupported (None: it declares the kind)."""
        if kind in self.kinds:
            return None
        return f"{self.name} declares no {kind} (it has: {', '.join(self.kinds) or 'none'})"

    def availability(self, device: str) -> str | None:
        """``None`` if the method can run on ``device`` here, else the reason it cannot."""
        if missing := missing_packages(*self.requires):
            return f"{', '.join(missing)} not installed"
        if device not in self.caps.devices:
            generic = f"needs {' or '.join(sorted(self.caps.devices))}, not {device}"
            return (self.caps.cpu_reason if device == "cpu" else None) or generic
        # The library's own reason first: it holds on any machine (CCE without VP).
        reason = None if self.extra_check is None else self.extra_check(device)
        if reason is None and device == "cuda" and not torch.cuda.is_available():
            return "no CUDA device"
        if reason is None and self.compiles and device == "cpu":
            if not (os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")):
                return "torch.compile's CPU backend (inductor) needs a C++ compiler: none on PATH"
        return reason

    def unsupported_reason(self, case: Case) -> str | None:
        """``None`` if the method computes ``case`` exactly as asked, else why not."""
        caps = self.caps
        for term, (asked, words) in _ASKED.items():
            if asked(case) and not getattr(caps, term):
                name, said = term.replace("_", " ").replace("z ", "z-"), words(case)
                why = f": {self.limits[term]}" if term in self.limits else said and f" ({said})"
                return f"no {name}{why}"
        if case.softcap is not None and case.device == "cpu" and caps.softcap_off_cpu:
            return caps.softcap_off_cpu
        if case.dtype not in caps.dtypes:
            return f"no {case.dtype} support"
        return None

    def prepare(self, case: Case, c: torch.Tensor) -> LossFn:
        """Untimed set-up (module construction, compilation hooks); returns the loss callable."""
        if reason := self.lacks("loss") or self.unsupported_reason(case):
            raise Unsupported(reason)
        assert self.build is not None
        return self.build(case, c)

    def unsupported_at(self, case: Case, shard: Any) -> str | None:
        """Why this method cannot compute ``case`` on this layout across ranks, or None."""
        reason = self.lacks("tp") or self.unsupported_reason(case)
        if reason is None and self.tp is not None and self.tp.shard_check is not None:
            reason = self.tp.shard_check(case, shard)
        return reason

    def prepare_tp(self, case: Case, c_shard: torch.Tensor, shard: Any) -> LossFn:
        """Untimed set-up on every rank (``tp_method.Shard``); returns the rank's loss."""
        if reason := self.unsupported_at(case, shard):
            raise Unsupported(reason)
        assert self.tp is not None
        return self.tp.build(case, c_shard, shard)
