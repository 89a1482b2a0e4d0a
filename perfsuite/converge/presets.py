"""Run sizes: ``smoke`` for any CPU (the Triton interpreter runs it; 20 steps catch a wrong
gradient), the others as commented. Cycled ``train_batches`` make a model overconfident, as
fine-tuning does: where smoothing acts."""

from __future__ import annotations

from dataclasses import dataclass

# What the parser offers and the modules that train, check and draw share, here where
# torch is not imported (``perfsuite converge --help`` and a bad argument need no torch).
DATA_KINDS = ("bigram", "text")  # a synthetic source whose truth is known, or real text
REFERENCE = "eager"  # the method every other is checked against


@dataclass(frozen=True)
class Preset:
    """Model, data and optimiser sizes of one converge run (the defaults: ``smoke``'s)."""

    name: str
    vocab: int = 512
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    intermediate: int = 128
    batch: int = 4
    seq: int = 32
    steps: int = 20
    lr: float = 3e-3
    eval_batches: int = 16
    support: int = 8  # the bigram source's successors per token
    zipf: float = 1.1  # and the Zipf exponent of its prior
    seed: int = 0
    train_batches: int | None = None  # distinct batches, cycled; None: a fresh one a step
    timeout_s: float = 3600.0  # per run
    target: str = "cpu"  # who the preset is for
    dtypes: tuple[str, ...] = ("fp32",)  # when --dtype is not given
    methods: tuple[str, ...] | None = None  # when --methods is not given (None: the device's)
    z_loss: float = 0.0  # PaLM's z-loss coefficient every method trains with

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.seq


PRESETS: dict[str, Preset] = {
    "smoke": Preset("smoke", timeout_s=600.0),
    # Native on CPU (ours runs its torch engine): interpreted ones would take hours.
    "cpu-calibration": Preset(
        "cpu-calibration", vocab=4096, hidden=128, intermediate=344, batch=16, seq=64,
        steps=300, lr=1e-3, eval_batches=8, support=16, train_batches=15,
        methods=("eager", "torch-native", "torchtune-chunked", "ours"),
    ),
    # The committed trained-activation workload's model (reports/filtering/): 8 batches
    # seen 50 times each end in a peaked softmax, as fine-tuning on a small set does.
    "cpu-filtering": Preset(
        "cpu-filtering", vocab=16384, hidden=128, intermediate=344, seq=128, steps=400,
        lr=5e-3, eval_batches=4, train_batches=8, methods=("eager",),
    ),
    # bf16 is how a GPU trains (cce's only dtype); fp32 gives the tight check.
    "small": Preset(
        "small", vocab=32768, hidden=256, layers=4, intermediate=688, batch=16, seq=256,
        steps=400, lr=1e-3, eval_batches=4, support=16, train_batches=40, target="cuda",
        dtypes=("fp32", "bf16"),
    ),
}  # fmt: skip
