"""Run sizes: ``smoke`` for any CPU, ``cpu-calibration`` for eager on a CPU, ``small``
for a GPU (and ``cpu-filtering``, the model behind reports/filtering/).

The Triton interpreter runs a kernel's programs one by one in numpy, so smoke keeps V, D
and the tokens per step tiny; its 20 steps show a wrong gradient (see
tests/converge/test_perturbation.py), not a trained model. The longer presets cycle
``train_batches`` distinct batches: repeated data makes a model overconfident, as
fine-tuning on a small set does, which is where label smoothing has most to correct
(reports/converge-cpu-calibration/ measures both).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Preset:
    """Model, data and optimiser sizes of one converge run."""

    name: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    intermediate: int
    batch: int
    seq: int
    steps: int
    lr: float
    eval_batches: int
    # Synthetic source: successors per token and the Zipf exponent of the prior.
    support: int = 8
    zipf: float = 1.1
    seed: int = 0
    # Distinct training batches, cycled in order; None: a fresh batch every step.
    train_batches: int | None = None
    # Per-run wall-clock limit of a worker (seconds).
    timeout_s: float = 1800.0
    # Who the preset is for, shown by --help and in the results.
    target: str = "cpu"
    # Training dtypes when --dtype is not given.
    dtypes: tuple[str, ...] = ("fp32",)
    # Methods when --methods is not given (None: DEFAULT_METHODS of the device).
    methods: tuple[str, ...] | None = None
    # PaLM's z-loss coefficient every method trains with (0: off).
    z_loss: float = 0.0

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.seq

    def with_steps(self, steps: int | None) -> Preset:
        return self if steps is None else replace(self, steps=steps)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SMOKE = Preset(
    name="smoke",
    vocab=512,
    hidden=64,
    layers=2,
    heads=4,
    intermediate=128,
    batch=4,
    seq=32,
    steps=20,
    lr=3e-3,
    eval_batches=16,
    timeout_s=600.0,
)

PRESETS: dict[str, Preset] = {
    "smoke": SMOKE,
    "cpu-calibration": replace(
        SMOKE,
        name="cpu-calibration",
        vocab=4096,
        hidden=128,
        intermediate=344,
        batch=16,
        seq=64,
        steps=300,
        lr=1e-3,
        eval_batches=8,
        support=16,
        train_batches=15,
        timeout_s=3600.0,
        # The natively computed methods (ours runs its torch engine on CPU): the
        # interpreted ones would take hours at this size.
        methods=("eager", "torch-native", "torchtune-chunked", "ours"),
    ),
    # The model behind the committed trained-activation workload (reports/filtering/): a
    # 16k cross-word BPE of the help pages (text data), 8 distinct batches seen 50 times
    # each, as fine-tuning on a small set does, so its softmax ends peaked. Eager only:
    # minutes on 2 CPU cores.
    "cpu-filtering": replace(
        SMOKE,
        name="cpu-filtering",
        vocab=16384,
        hidden=128,
        intermediate=344,
        seq=128,
        steps=400,
        lr=5e-3,
        eval_batches=4,
        train_batches=8,
        timeout_s=3600.0,
        methods=("eager",),
    ),
    "small": replace(
        SMOKE,
        name="small",
        vocab=32768,
        hidden=256,
        layers=4,
        intermediate=688,
        batch=16,
        seq=256,
        steps=400,
        lr=1e-3,
        eval_batches=4,
        support=16,
        train_batches=40,
        timeout_s=3600.0,
        target="cuda",
        # bf16 is how a GPU trains (and the only dtype cce takes); fp32 gives the tight check.
        dtypes=("fp32", "bf16"),
    ),
}


def default_methods(device: str) -> tuple[str, ...]:
    """The methods run when --methods is not given: those of the paper's table that
    declare a loss to train with (``timed_by_default``; ablations by name). On CPU the
    ones that compile are left out (compiling the loss under inductor costs more than
    the whole smoke run); cce's and quack's runs are recorded unavailable there."""
    from perfsuite.plan.registry import methods_for

    return tuple(
        name
        for name, m in methods_for("train").items()
        if m.timed_by_default and not (device == "cpu" and m.compiles)
    )
