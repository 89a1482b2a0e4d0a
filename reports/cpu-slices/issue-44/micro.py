"""fwd+bwd of ours' torch engine (the CPU path), min and median of 8 timed calls."""

import json
import statistics
import sys
import time

import torch

from perfsuite.kernels import linear_cross_entropy

torch.manual_seed(0)
n, v, d = 512, 8192, 256
e = torch.randn(n, d) / d**0.25
c = torch.randn(v, d) / d**0.25
t = torch.randint(0, v, (n,))
out = {}
for beta in (0.0, 0.1):
    times = []
    for _ in range(10):
        ee, cc = e.clone().requires_grad_(), c.clone().requires_grad_()
        t0 = time.perf_counter()
        linear_cross_entropy(
            ee, cc, t, label_smoothing=beta, softcap=30.0, engine="torch"
        ).backward()
        times.append((time.perf_counter() - t0) * 1e3)
    times = times[2:]
    out[beta] = (min(times), statistics.median(times))
print(json.dumps({"side": sys.argv[1], **{str(k): v for k, v in out.items()}}))
