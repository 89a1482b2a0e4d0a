"""Shape presets: the (tokens, vocab, hidden) of real models' last layer."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Shape:
    name: str
    tokens: int
    vocab: int
    hidden: int
    dtype: str = "bf16"
    # Softcap the model uses; applied only when asked (``--softcap``).
    softcap: float | None = None

    def with_overrides(
        self, tokens: int | None = None, vocab: int | None = None, hidden: int | None = None
    ) -> Shape:
        """The shape with N, V or D overridden (argparse checked them positive)."""
        changed = {k: v for k, v in (("tokens", tokens), ("vocab", vocab), ("hidden", hidden)) if v}
        if not changed:
            return self
        return replace(self, name=f"{self.name}*", **changed)


PRESETS: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("gemma2-2b", 8192, 256000, 2304, softcap=30.0),
        Shape("gemma2-9b", 8192, 256000, 3584, softcap=30.0),
        Shape("llama3-8b", 8192, 128256, 4096),
        Shape("llama3.2-1b", 8192, 128256, 2048),
        Shape("llama3.2-3b", 8192, 128256, 3072),
        Shape("mistral-7b", 8192, 32768, 4096),
        Shape("qwen2.5-7b", 8192, 152064, 3584),
        # Small enough that `perfsuite run --shape smoke` (every method, Triton ones
        # under the interpreter) ends within 3 minutes on a 2-core CPU, large enough
        # that eager's N x V logits (2 MiB) dominate its memory (dC is 1 MiB): N > D.
        Shape("smoke", 256, 2048, 128, dtype="fp32", softcap=30.0),
    )
}


def get_shape(name: str) -> Shape:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown shape {name!r}; presets: {', '.join(PRESETS)}") from None
