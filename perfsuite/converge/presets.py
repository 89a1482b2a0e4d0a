"""Run sizes: ``smoke`` fits a 2-core CPU under the Triton interpreter, ``small`` a GPU.

The interpreter runs a Triton kernel's programs one by one in numpy, so on CPU
the vocabulary, the hidden size and the tokens per step set the run time of
``ours`` and ``liger``: smoke keeps all three tiny.
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

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.seq

    def with_steps(self, steps: int | None) -> Preset:
        return self if steps is None else replace(self, steps=steps)

    def with_seed(self, seed: int | None) -> Preset:
        return self if seed is None else replace(self, seed=seed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, Preset] = {
    "smoke": Preset(
        name="smoke",
        vocab=512,
        hidden=64,
        layers=2,
        heads=4,
        intermediate=128,
        batch=8,
        seq=32,
        steps=20,
        lr=3e-3,
        eval_batches=4,
    ),
    "small": Preset(
        name="small",
        vocab=4096,
        hidden=256,
        layers=4,
        heads=4,
        intermediate=688,
        batch=16,
        seq=128,
        steps=200,
        lr=1e-3,
        eval_batches=4,
        support=16,
    ),
}

# Methods run when --methods is not given. torch-compile is left out on CPU:
# compiling the loss costs more than the whole smoke run.
DEFAULT_METHODS = {
    "cpu": ("eager", "ours", "liger"),
    "cuda": ("eager", "torch-compile", "ours", "liger"),
}
