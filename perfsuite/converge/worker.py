"""One method's converge runs in a fresh process (``WORKER``): JSON lines ``{"model"}`` (the
parent never imports transformers), ``{"run": i, "step"}`` per step and ``{"run": i,
"result", "params": PATH}``, the final weights saved for parity."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.harness.worker import Served


@dataclass
class WorkerSpec:
    method: str
    cases: list[dict[str, Any]]  # {"beta": float, "dtype": str}
    preset: dict[str, Any]
    data: str
    device: str
    out: str  # the final weights go beside it


@contextmanager
def _session(spec: WorkerSpec, emit: Callable[[Any], None]) -> Iterator[tuple[Any, Any]]:
    """The preset, its data and the method, the model described before the freeze."""
    from perfsuite.converge.data import build_dataset
    from perfsuite.converge.model import describe_model, set_deterministic
    from perfsuite.converge.presets import Preset
    from perfsuite.plan.registry import get_method

    preset = Preset(**spec.preset)
    set_deterministic(preset.seed)
    data = build_dataset(preset, spec.data)
    method = get_method(spec.method)
    emit({"model": describe_model(preset)})  # transformers imported: frozen after
    yield (preset, data, method), emit


def run_case(
    spec: WorkerSpec,
    state: tuple[Any, Any, Any],
    index: int,
    cell: dict[str, Any],
    emit: Callable[[Any], None],
    stage: Callable[[str], None],
) -> None:
    """One training run, each step's record emitted as it ends, the weights saved."""
    import torch

    from perfsuite.converge.train import train_run

    preset, data, method = state

    def on_step(record: dict[str, Any]) -> None:
        emit({"run": index, "step": record})

    result = train_run(method, preset, data, cell["beta"], cell["dtype"], spec.device, on_step)
    path = None
    if result.params is not None:
        name = f"{spec.method}-beta{cell['beta']:g}-{cell['dtype']}.pt"
        path = str(Path(spec.out).with_name(name))
        torch.save(result.params, path)
    emit({"run": index, "result": result.to_dict(), "params": path})


WORKER = Served(WorkerSpec, run_case, _session)
