"""AdamW's step after each loss's backward, outside the suite (reports/cpu-step/).

``python reports/cpu-step/adamw_probe.py eager|ours|torch-compile [--profile]`` builds the
1-layer Gemma2-2B of ``perfsuite step`` (fp32, 256 tokens), runs four training steps in one
process and prints each one's fwd+bwd, ``optimizer.step()`` and ``zero_grad`` seconds;
``--profile`` adds the profiler's table of the last ``optimizer.step()`` by op and shape.
Run it with the step worker's allocator settings (``MALLOC_MMAP_THRESHOLD_=65536``).
"""

from __future__ import annotations

import argparse
import time

import torch

from perfsuite.plan.registry import all_methods
from perfsuite.step.model import build_model, make_batch
from perfsuite.step.presets import PRESETS, Size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    preset, size = PRESETS["gemma2-2b"], Size(layers=1, seq=256, batch=1)
    model = build_model(preset, size, 0, "cpu")
    loss_of = all_methods()[args.method].step.patch(model, preset, 0.0)  # as the step worker
    ids = make_batch(preset, size, 0, "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    for i in range(4):
        t0 = time.perf_counter()
        loss_of(ids).backward()
        t1 = time.perf_counter()
        if args.profile and i == 3:
            from torch.profiler import profile

            with profile(record_shapes=True) as prof:
                optimizer.step()
            print(prof.key_averages(group_by_input_shape=True).table(row_limit=6))
        else:
            optimizer.step()
        t2 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        print(f"{args.method} step {i}: fwd+bwd {t1 - t0:.2f} s, optimizer.step {t2 - t1:.2f} s, "
              f"zero_grad {t3 - t2:.2f} s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
