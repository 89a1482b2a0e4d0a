"""``--profile`` where the timer cannot time a call (issue 45: ``--timer graph`` could not
capture ours on the H200, and the profile step came back without its trace): the row
stays ``unsupported``, keeps its memory, and still gets the profile, saying so. In
process, the worker's own ``run_case``; on a CPU no call can be captured."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from perfsuite.baselines.torch_methods import eager_loss
from perfsuite.measure.profile import PROFILED_UNTIMED
from perfsuite.measure.timers import NO_GPU
from perfsuite.method import Capabilities, SimpleMethod
from perfsuite.run.worker import WorkerSpec, run_case

RAW = dict(
    shape="tiny", tokens=32, vocab=300, hidden=24, dtype="fp32", beta=0.1, softcap=None,
    device="cpu", timer="graph",
)  # fmt: skip
SMOOTHS = Capabilities(label_smoothing=True)


def uncapturable(case, c):  # noqa: ANN001, ANN201
    """A throwaway method whose call syncs with the host (``.item()``), as no CUDA graph
    capture allows."""

    def loss_fn(e, c, t):  # noqa: ANN001, ANN202
        loss = eager_loss(e, c, t, case.beta)
        assert loss.isfinite().item()
        return loss

    return loss_fn


def run(profile: Path | None) -> list:
    method = SimpleMethod("uncapturable", "eager with a host sync", uncapturable, SMOOTHS)
    spec = WorkerSpec(
        "uncapturable", [RAW], out="", phases=["fwd+bwd"], samples=2, warmup=1,
        timer="graph", profile=None if profile is None else str(profile),
    )  # fmt: skip
    rows: list = []
    run_case(spec, method, 0, RAW, rows.append)
    return rows


def test_an_uncapturable_call_is_still_profiled(tmp_path: Path) -> None:
    (row,) = run(tmp_path)
    assert row.status == "unsupported" and row.timer == "graph"
    assert row.reason == f"--timer graph: {NO_GPU}; {PROFILED_UNTIMED}"
    assert row.median_ms is None and row.peak_bytes is not None  # untimed, memory kept
    assert row.trace == "uncapturable__tiny__fp32__b0.1__fwd-bwd.json.gz"
    with gzip.open(tmp_path / row.trace, "rt") as f:
        assert json.load(f)["traceEvents"]
    assert row.breakdown["source"] == "cpu-ops" and row.breakdown["classes"]["gemm"] > 0


def test_without_profile_the_reason_is_the_timers_alone(tmp_path: Path) -> None:
    (row,) = run(None)
    assert row.status == "unsupported" and row.reason == f"--timer graph: {NO_GPU}"
    assert row.trace is None and row.breakdown is None
