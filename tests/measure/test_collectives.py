"""The collectives one call issues, read from torch's profiler on every torch the project
runs: torch 2.13's events carry their inputs' dtypes, torch 2.11's (the H200's image,
issue 45) do not."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch.autograd.profiler_util import FunctionEvent

from perfsuite.measure import collectives
from perfsuite.measure.collectives import measure_collectives

CPU = torch.device("cpu")


@pytest.fixture
def one_rank() -> Iterator[None]:
    """A one-rank gloo group in this process (an in-memory store: no process, no port)."""
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    yield
    dist.destroy_process_group()


def exchange() -> None:
    """Two collectives of known size: 30 bytes of bf16 and 96 of fp64 (the gather's
    input, one rank)."""
    dist.all_reduce(torch.ones(3, 5, dtype=torch.bfloat16))
    out = torch.empty(12, dtype=torch.float64)
    dist.all_gather_into_tensor(out, torch.ones(12, dtype=torch.float64))


def as_torch_2_11(monkeypatch: pytest.MonkeyPatch) -> list[FunctionEvent]:
    """The profiler's real events with torch 2.11's shape: no ``input_dtypes``."""
    seen: list[FunctionEvent] = []
    run = collectives.run_profiled

    def profiled(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        prof, wall_ms = run(*args, **kwargs)
        for event in prof.function_events:
            vars(event).pop("input_dtypes", None)
            seen.append(event)
        return prof, wall_ms

    monkeypatch.setattr(collectives, "run_profiled", profiled)
    return seen


@pytest.mark.filterwarnings("ignore:.*all_gather_into_tensor.*:FutureWarning")
@pytest.mark.parametrize("shape", ["with input_dtypes", "torch 2.11: without"])
def test_counts_each_collective_and_its_input_bytes(
    one_rank: None, shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = as_torch_2_11(monkeypatch) if shape.startswith("torch 2.11") else None
    found = measure_collectives(exchange, CPU)
    if seen is not None:  # the events really were 2.11's shape
        assert seen and not any(hasattr(e, "input_dtypes") for e in seen)
    assert (found.count, found.nbytes) == (2, 3 * 5 * 2 + 12 * 8)
    assert found.ms > 0
