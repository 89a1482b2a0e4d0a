"""Per-kernel CUDA times of one fwd+bwd of ours at Gemma2-2B (GPU only; torch.profiler)."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from perfsuite.kernels import linear_cross_entropy

N, V, D = 8192, 256_000, 2304


def step(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor, **options) -> None:
    e.grad = c.grad = None
    linear_cross_entropy(e, c, t, **options).backward()


def main() -> None:
    torch.manual_seed(0)
    e = torch.randn(N, D, device="cuda").bfloat16().requires_grad_()
    c = (torch.randn(V, D, device="cuda") / D**0.5).bfloat16().requires_grad_()
    t = torch.randint(0, V, (N,), device="cuda")
    for options in ({}, {"backward": "tiles"}, {"backward": "tiles", "filter_eps": "auto"}):
        for _ in range(2):
            step(e, c, t, **options)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step(e, c, t, **options)
            torch.cuda.synchronize()
        print(options)
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))


if __name__ == "__main__":
    main()
