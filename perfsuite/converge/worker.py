"""One method's converge runs, inside a fresh process (``main([SPEC.json])``, started by
the harness's ``python_worker``): JSON lines ``{"model"}``
(so the parent never imports transformers), ``{"start": i}``, ``{"run": i, "step"}`` per
step and ``{"run": i, "result", "params": PATH}``, the final weights saved for parity."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class WorkerSpec:
    method: str
    runs: list[dict[str, Any]]  # {"beta": float, "dtype": str}
    preset: dict[str, Any]
    data: str
    device: str
    out: str
    params_dir: str


def main(argv: list[str]) -> int:
    spec = WorkerSpec(**json.loads(Path(argv[0]).read_text()))
    # Imported after the parent set TRITON_INTERPRET in this process's environment.
    import torch

    from perfsuite.converge.data import build_dataset
    from perfsuite.converge.model import describe_model, set_deterministic
    from perfsuite.converge.presets import Preset
    from perfsuite.converge.train import train_run
    from perfsuite.converge.yardstick import METHODS as YARDSTICKS
    from perfsuite.harness.protocol import emitter
    from perfsuite.measure.memory import freeze_what_exists
    from perfsuite.plan.registry import get_method

    preset = Preset(**spec.preset)
    set_deterministic(preset.seed)
    data = build_dataset(preset, spec.data)
    method = YARDSTICKS.get(spec.method) or get_method(spec.method)
    with emitter(spec.out) as emit:
        emit({"model": describe_model(preset)})  # transformers imported: frozen
        freeze_what_exists()
        for i, cell in enumerate(spec.runs):
            emit({"start": i})
            result = train_run(
                method,
                preset,
                data,
                cell["beta"],
                cell["dtype"],
                spec.device,
                on_step=lambda record, i=i: emit({"run": i, "step": record}),
            )
            path = None
            if result.params is not None:
                name = f"{spec.method}-beta{cell['beta']:g}-{cell['dtype']}.pt"
                path = str(Path(spec.params_dir) / name)
                torch.save(result.params, path)
            emit({"run": i, "result": result.to_dict(), "params": path})
    return 0
