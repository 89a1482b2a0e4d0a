"""``history demo``: a synthetic nightly history with a known step (docs/history.md)."""

from __future__ import annotations

import hashlib
import itertools
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from perfsuite.results.results import PHASES, new_document, write_results

DEVICE = {"kind": "cuda", "name": "synthetic demo GPU", "synthetic": True}
ROW = {"kind": "loss", "shape": "demo", "tokens": 8192, "vocab": 256000, "hidden": 2304,
       "dtype": "bf16", "softcap": None, "status": "ok", "device": "cuda",
       "workload": "random"}  # fmt: skip
METHODS = ("eager", "ours")
BETAS = (0.0, 0.1)
START = datetime(2026, 1, 1, 3, 17, tzinfo=timezone.utc)
RUN_NOISE = 0.0033
SAMPLE_NOISE = 0.005
SAMPLES = 20
# More runs than a year of nightlies; above it a typo (--runs 1000000) wrote files for minutes.
MAX_RUNS = 1000


def document(
    i: int, rng: np.random.Generator, step: float, step_at: int, step_method: str, seed: int
) -> dict[str, Any]:
    """Run ``i`` of the demo history (``rng`` draws its noise)."""
    rows = []
    for method, beta, phase in itertools.product(METHODS, BETAS, PHASES):
        factor = 1 + step if method == step_method and i >= step_at else 1.0
        scale = {"eager": 3.0, "ours": 1.0}.get(method, 2.0)
        base = 10.0 * scale * (1 + PHASES.index(phase)) * (1.03 if beta else 1.0)
        level = base * factor * (1 + rng.normal(0, RUN_NOISE))
        samples = level * (1 + rng.normal(0, SAMPLE_NOISE, SAMPLES))
        p20, median, p80 = map(float, np.percentile(samples, [20, 50, 80]))
        peak = (6 if method == "eager" else 1) << 30
        rows.append({**ROW, "method": method, "beta": beta, "phase": phase, "median_ms": median})
        rows[-1].update(p20_ms=p20, p80_ms=p80, samples_ms=samples.tolist(), peak_bytes=peak)
    sha = hashlib.sha1(f"perfsuite history demo {seed} {i}".encode()).hexdigest()
    what = f"perfsuite history demo: run {i}, seed {seed}"
    if step:
        what += f"; step {step:+.1%} on {step_method} from run {step_at}"
    env = {
        "created": (START + timedelta(days=i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git": {"sha": sha, "dirty": False},
        "versions": {"perfsuite": "demo", "torch": "demo"},
        "device": DEVICE,
        "synthetic": what,
    }
    return new_document(env, rows)


def write(
    folder: str, runs: int, step: float, step_at: int, step_method: str, seed: int
) -> list[Path]:
    """Write ``runs`` results files ``demo-NNN.json`` into ``folder``; returns their paths."""
    rng = np.random.default_rng(seed)
    docs = (document(i, rng, step, step_at, step_method, seed) for i in range(runs))
    return [write_results(Path(folder) / f"demo-{i:03d}.json", doc) for i, doc in enumerate(docs)]
