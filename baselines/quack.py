"""QuACK (``quack-kernels``, Tri Dao's CuTe-DSL kernels): ``chunked_linear_cross_entropy``
(0.6.5) with the package's defaults. Its forward turns each token chunk's logits into their
gradient in place and folds it into ``dx`` and an fp32 ``dW``; the backward only scales them."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from perfsuite import method as _method
from perfsuite.method import Capabilities, Case, Holds, LossFn, SimpleMethod, Unavailable

CPU_REASON = (
    "needs CUDA: quack's CuTe-DSL kernels run on Hopper or Blackwell GPUs only "
    "(no CPU or interpreter path)"
)
MISSING_REASON = (
    "quack-kernels not installed (pip install quack-kernels: a Hopper or Blackwell GPU, "
    "a recent CUDA and Python)"
)
MIN_CAPABILITY = (9, 0)
ALIGN = 8  # elements: 16 bytes of a 16-bit dtype (TMA), and quack's N % 8 assert


@dataclass
class QuackMethod(SimpleMethod):
    """``SimpleMethod`` with quack's reasons: why not on CPU, and its alignment."""

    def availability(self, device: str) -> str | None:
        if _method.missing_packages(*self.requires):
            return MISSING_REASON
        return super().availability(device)

    def unsupported_reason(self, case: Case) -> str | None:
        reason = super().unsupported_reason(case)
        sizes = {"N": case.tokens, "V": case.vocab, "D": case.hidden}
        odd = [f"{name}={value}" for name, value in sizes.items() if value % ALIGN]
        if reason is None and odd:
            return f"quack's TMA GEMMs need N, V and D multiples of {ALIGN} ({', '.join(odd)})"
        return reason


def _check_device(device: torch.device) -> None:
    """Hopper or newer, asked in the worker (where the CUDA context lives)."""
    if device.type != "cuda":
        raise Unavailable(CPU_REASON)
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < MIN_CAPABILITY:
        raise Unavailable(
            f"quack-kernels targets Hopper and Blackwell (sm_90 and newer); "
            f"this GPU is sm_{major}{minor}"
        )


def _build(case: Case, c: torch.Tensor) -> LossFn:
    _check_device(c.device)
    # CuTe DSL / CUDA mismatches fail at import.
    loss = _method.imported("quack.linear_cross_entropy", "chunked_linear_cross_entropy")
    signature = "x weight target chunk_size ignore_index reduction"
    _method.check_signature(loss, signature, "this adapter was written against (0.6.5)")
    return functools.partial(loss, ignore_index=case.ignore_index, reduction="mean")


METHODS = [
    QuackMethod(
        name="quack",
        description="QuACK chunked_linear_cross_entropy (CuTe-DSL: token chunks, CE kernel, "
        "grads computed in forward, fp32 dW; no label smoothing, no softcap; sm_90+)",
        build=_build,
        caps=Capabilities(
            devices=frozenset({"cuda"}),
            cpu_reason=CPU_REASON,
            dtypes=frozenset({"bf16", "fp16"}),
            grads_in_forward=True,
            holds=Holds("none"),
        ),
        requires=("quack",),
        distributions=("quack-kernels", "nvidia-cutlass-dsl"),
    ),
]
