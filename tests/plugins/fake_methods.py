"""Methods that misbehave on purpose, loaded through PERFSUITE_PLUGINS, so that
every status the suite reports is provoked by a test."""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import torch

from perfsuite.baselines.torch_methods import eager_loss
from perfsuite.method import (
    Capabilities,
    Case,
    Holds,
    LossFn,
    LossTerms,
    SimpleMethod,
    Unavailable,
    Unsupported,
)


def _eager(case: Case, c: torch.Tensor, before=lambda case: None, scale: float = 1.0) -> LossFn:
    """Eager's loss, after ``before(case)`` (the misbehaviour) and times ``scale``."""

    def loss_fn(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        before(case)
        return eager_loss(e, c, t, case.beta, case.softcap) * scale

    return loss_fn


def _wrong(case: Case, c: torch.Tensor) -> LossFn:
    # Drops the smoothing term and adds a bias: a plausible-looking wrong loss.
    return _eager(dataclasses.replace(case, beta=0.0), c, scale=1.01)


def _raise(case: Case) -> None:
    raise RuntimeError("deliberate failure inside the loss")


def _crash_at_smoothing(case: Case) -> None:
    if case.beta > 0:
        os.kill(os.getpid(), signal.SIGSEGV)


def _broken_import(case: Case, c: torch.Tensor) -> LossFn:
    # Installed but unusable: only the worker, which imports it, can tell.
    raise Unavailable("fake_lib failed to import: deliberate")


def _refuses_at_prepare(case: Case, c: torch.Tensor) -> LossFn:
    # Capabilities say yes, the library says no (e.g. a version lacking an argument).
    if case.beta > 0:
        raise Unsupported("this fake_lib version has no label_smoothing argument")
    return _eager(case, c)


def _after(before):
    return lambda case, c: _eager(case, c, before)


def _sleeping(seconds: float):
    return _after(lambda case: time.sleep(seconds))


SMOOTHS = Capabilities(label_smoothing=True)
_TERMS = Capabilities(label_smoothing=True, z_loss=True, class_weights=True)

METHODS = [
    SimpleMethod("fake-wrong", "biased loss", _wrong, caps=SMOOTHS),
    # Claims z-loss and class weights, computes plain eager: the gate must see it.
    SimpleMethod("fake-zloss-ignored", "z-loss variant without z-loss", _eager, caps=_TERMS,
                 terms=LossTerms(z_loss=0.05)),
    SimpleMethod("fake-weights-ignored", "weighted variant without weights", _eager,
                 caps=_TERMS, terms=LossTerms(class_weights=True)),
    SimpleMethod("fake-no-smoothing", "eager without smoothing support", _eager,
                 caps=Capabilities()),
    SimpleMethod("fake-missing-package", "needs a package that does not exist", _eager,
                 requires=("perfsuite_no_such_package",)),
    SimpleMethod("fake-raises", "raises in forward", _after(_raise), caps=SMOOTHS),
    SimpleMethod("fake-crash", "segfaults at beta > 0", _after(_crash_at_smoothing),
                 caps=SMOOTHS),
    SimpleMethod("fake-broken-import", "import fails in the worker", _broken_import),
    SimpleMethod("fake-refuses", "refuses beta > 0 at prepare", _refuses_at_prepare,
                 caps=SMOOTHS),
    SimpleMethod("fake-sleeps", "takes a minute per call", _sleeping(60)),
    # A cell of a few seconds: progress lines while it runs (progress.HEARTBEAT_S patched).
    SimpleMethod("fake-slow", "0.4 s per call", _sleeping(0.4), timed_by_default=False),
    # Eager, declared a Triton method: on a CPU the runner treats it as interpreted
    # (TRITON_INTERPRET, its protocol, beside the native workers) without Triton's cost.
    SimpleMethod("fake-interpreted",
                 "eager, scheduled and measured as an interpreted Triton method", _eager,
                 caps=Capabilities(label_smoothing=True, triton=True), timed_by_default=False),
    # Eager, declared to hold 400 copies of the logits: predicted over a small limit.
    SimpleMethod("fake-hoards", "eager, declared to hold 400 copies of the N x V logits",
                 _eager, caps=dataclasses.replace(SMOOTHS, holds=Holds("logits", (400.0, 400.0))),
                 timed_by_default=False),
]  # fmt: skip
