"""A training step with our loss under torch.compile(fullgraph=True): no graph break.

    python examples/compile_step.py [--backend inductor|aot_eager] [--steps 20]

Prints dynamo's graph and break counts for the step, the eager and compiled step times,
and the largest loss difference between the two over the steps (CPU or CUDA).
"""

from __future__ import annotations

import argparse
import logging
import time

# Two messages from other projects, not this example's to fix: torchao, when something
# imports it, logs each CUDA-only library of its own it cannot load here, and torch says
# that torchao registers its Enums with pytree the deprecated way. Only those are dropped.
logging.getLogger("torchao").addFilter(lambda r: not r.getMessage().startswith("Failed to load"))
logging.getLogger("torch.utils._pytree").addFilter(
    lambda r: "is an Enum subclass" not in r.getMessage()
)

import torch  # noqa: E402

from perfsuite.kernels import linear_cross_entropy  # noqa: E402


class LM(torch.nn.Module):
    """Embedding, one MLP block, our loss on the output embedding (tied classifier)."""

    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim)
        )
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        h = self.norm(h + self.mlp(h))
        return linear_cross_entropy(
            h, self.embed.weight, targets, label_smoothing=0.1, softcap=30.0, z_loss=1e-4
        )


def train(step, model: LM, batches, optimizer) -> tuple[list[float], float]:
    losses, began = [], 0.0
    for i, (tokens, targets) in enumerate(batches):
        if i == 1:  # the first step compiles: not timed
            began = time.perf_counter()
        optimizer.zero_grad()
        loss = step(tokens, targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, (time.perf_counter() - began) / (len(batches) - 1) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    vocab, dim, batch, seq = 8192, 256, 8, 128
    generator = torch.Generator().manual_seed(0)
    batches = [
        tuple(t.to(device) for t in torch.randint(0, vocab, (2, batch, seq), generator=generator))
        for _ in range(args.steps)
    ]
    results = {}
    for name in ("eager", "compiled"):
        torch.manual_seed(0)
        model = LM(vocab, dim).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        step = model
        if name == "compiled":
            explained = torch._dynamo.explain(model)(*batches[0])
            print(
                f"dynamo: {explained.graph_count} graph(s), "
                f"{explained.graph_break_count} graph break(s)"
            )
            torch._dynamo.reset()
            step = torch.compile(model, backend=args.backend, fullgraph=True)
        results[name] = train(step, model, batches, optimizer)
    pairs = zip(results["eager"][0], results["compiled"][0], strict=True)
    diff = max(abs(a - b) for a, b in pairs)
    print(
        f"{device}, V={vocab}, D={dim}, {batch}x{seq} tokens, {args.steps} AdamW steps: "
        f"eager {results['eager'][1]:.1f} ms/step, torch.compile({args.backend}, "
        f"fullgraph=True) {results['compiled'][1]:.1f} ms/step; "
        f"max |loss difference| {diff:.2e}"
    )


if __name__ == "__main__":
    main()
