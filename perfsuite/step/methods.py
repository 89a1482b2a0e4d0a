"""The losses one training step is measured with, as the parent sees them: names,
what each supports, why one cannot run here. How each is applied to a model is
``perfsuite.step.adapters`` (worker side, where transformers is imported).

Every method trains the same model on the same batch; they differ only in how the
loss goes from the decoder's last hidden states to a scalar:

* ``eager``: the model's own ``forward(labels=...)``, logits materialised;
* ``torch-compile``: the same, the whole model and loss under ``torch.compile``;
* ``ours``: ``perfsuite.kernels.patch(model, label_smoothing=β)``;
* ``liger``: Liger's own patch for the architecture, its fused linear cross-entropy only;
* ``cce``: Cut Cross-Entropy's ``cce_patch(model)``;
* ``torchtune-chunked``: torchtune's ``CEWithChunkedOutputLoss`` on the hidden states.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass

from perfsuite.baselines.cce import CPU_REASON as CCE_CPU_REASON
from perfsuite.baselines.liger import SOFTCAP_CPU_REASON as LIGER_SOFTCAP_CPU_REASON
from perfsuite.method import package_version
from perfsuite.step.presets import StepPreset

DTYPES = ("fp32", "bf16")


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (a missing parent
    package answers False instead of raising)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@dataclass(frozen=True)
class StepMethod:
    name: str
    description: str
    requires: tuple[str, ...] = ()
    distributions: tuple[str, ...] = ()
    # Triton kernels: on CPU they run under TRITON_INTERPRET=1 (timings flagged †).
    triton: bool = False
    smoothing: bool = True
    softcap: bool = True
    dtypes: frozenset[str] = frozenset(DTYPES)
    # What the loss holds at its peak, for the memory estimate (perfsuite.step.estimate):
    # "logits" (eager's N x V copies), "compiled", "chunks" (every chunk's logits kept,
    # one fp32 at a time), "fused" (token chunks of logits, Liger), "none" (tiles).
    holds: str = "none"
    cpu_reason: str | None = None

    def availability(self, device: str) -> str | None:
        """None when the method can run on ``device`` here, else why not."""
        if device == "cpu" and self.cpu_reason:
            return self.cpu_reason
        for module in self.requires:
            if not _installed(module):
                return _missing(module)
        if self.name == "torch-compile" and device == "cpu" and not _cxx():
            return "torch.compile's CPU backend (inductor) needs a C++ compiler: none on PATH"
        return None

    def case_reason(
        self, preset: StepPreset, dtype: str, beta: float, device: str
    ) -> tuple[str, str] | None:
        """``(status, reason)`` when the method cannot compute this case as asked."""
        if beta > 0 and not self.smoothing:
            return "unsupported", f"{self.name} has no label smoothing (β={beta:g})"
        if preset.softcap is not None and not self.softcap:
            return "unsupported", (
                f"{self.name} has no logit softcap ({preset.name} caps its logits at "
                f"{preset.softcap:g}); computing it uncapped would be another loss"
            )
        if dtype not in self.dtypes:
            return "unsupported", f"{self.name} does not train in {dtype}"
        if self.name == "liger" and device == "cpu" and preset.softcap is not None:
            return "unavailable", LIGER_SOFTCAP_CPU_REASON
        return None


def _missing(module: str) -> str:
    """``x not installed``, or which installed package lacks the submodule ``x.y``."""
    top = module.split(".")[0]
    if top != module and _installed(top):
        dist = {"cut_cross_entropy": "cut-cross-entropy"}.get(top, top)
        return f"{dist} {package_version(dist) or ''} has no {module}".replace("  ", " ")
    return f"{top} not installed"


def _cxx() -> bool:
    return bool(os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++"))


METHODS: dict[str, StepMethod] = {
    m.name: m
    for m in (
        StepMethod(
            "eager",
            "the model's forward(labels=...): N x V logits, transformers' ForCausalLMLoss "
            "(at β > 0 the same logits through F.cross_entropy(label_smoothing=β))",
            holds="logits",
        ),
        StepMethod(
            "torch-compile",
            "torch.compile of the whole model and its eager loss (compiled on the first "
            "step, which is measured once: compile_ms)",
            holds="compiled",
        ),
        StepMethod(
            "ours",
            "perfsuite.kernels.patch(model, label_smoothing=β): the decoder's hidden states "
            "and lm_head.weight into our kernel, no logits (torch engine on CPU)",
            requires=("perfsuite.kernels.patch",),
            distributions=("triton",),
        ),
        StepMethod(
            "liger",
            "Liger's apply_liger_kernel_to_<arch>(fused_linear_cross_entropy=True, "
            "model=...), its other kernels off: label_smoothing=β passed to forward",
            requires=("liger_kernel",),
            distributions=("liger-kernel", "triton"),
            triton=True,
            holds="fused",
        ),
        StepMethod(
            "cce",
            "Cut Cross-Entropy's cce_patch(model, impl='cce'): no label smoothing; bf16/fp16 only",
            requires=("cut_cross_entropy", "cut_cross_entropy.transformers"),
            distributions=("cut-cross-entropy", "triton"),
            triton=True,
            smoothing=False,
            dtypes=frozenset({"bf16"}),
            cpu_reason=CCE_CPU_REASON,
        ),
        StepMethod(
            "torchtune-chunked",
            "torchtune CEWithChunkedOutputLoss on the hidden states projected in 8 chunks "
            "(as its TransformerDecoder does): no label smoothing, no softcap",
            requires=("torchtune",),
            distributions=("torchtune",),
            smoothing=False,
            softcap=False,
            holds="chunks",
        ),
    )
}


def resolve(text: str | None) -> list[str]:
    """Method names from ``--methods`` (default: all), in table order."""
    if text is None:
        return list(METHODS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("--methods is empty")
    unknown = [n for n in names if n not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(METHODS)}")
    return [n for n in METHODS if n in names]
