"""The train cell kind: a sweep's runs, each a (method, beta, dtype), trained by
``perfsuite.converge.worker`` processes through the harness; runs the parent can decide
alone (no training loss, unavailable, unsupported) get no worker."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from perfsuite.converge.presets import Preset
from perfsuite.converge.train import RunResult, case_for, refusal
from perfsuite.converge.worker import WorkerSpec
from perfsuite.harness.kind import Kind
from perfsuite.harness.lifecycle import python_worker
from perfsuite.method import SimpleMethod


@dataclass(frozen=True)
class Cell:
    """One run to make: a method at a beta in a dtype."""

    method: str
    beta: float
    dtype: str


@dataclass
class TrainKind(Kind):
    """Training runs: a case is ``{"beta", "dtype"}`` (and the step's N, V, D, for the
    machine's state labels); its one row is the run's result."""

    methods: dict[str, SimpleMethod]
    preset: Preset
    data: str
    device: str
    jobs: int
    timeout_s: float
    # Called with a worker's description of the model (every poll: keep the first).
    on_model: Callable[[dict[str, Any]], None] | None = None
    name, per_case = "train", True

    def case(self, cell: Cell) -> dict[str, Any]:
        p = self.preset
        size = {"tokens": p.tokens_per_step, "vocab": p.vocab, "hidden": p.hidden}
        return {"beta": cell.beta, "dtype": cell.dtype, **size}

    def decided(self, method: str, case: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The run's row when no worker is needed to know (unavailable, unsupported)."""
        beta, dtype = case["beta"], case["dtype"]
        refused = refusal(self.methods[method], case_for(self.preset, beta, dtype, self.device))
        return None if refused is None else [RunResult(method, beta, dtype, *refused).to_dict()]

    def command(self, method: str, cases: list[dict[str, Any]], out: Path, spec: Path) -> list[str]:
        runs = [{"beta": c["beta"], "dtype": c["dtype"]} for c in cases]
        worker = WorkerSpec(
            method, runs, self.preset.to_dict(), self.data, self.device, str(out), str(spec.parent)
        )
        spec.write_text(json.dumps(asdict(worker)))
        return python_worker("perfsuite.converge.worker", str(spec))

    def finished(self, lines: list[dict[str, Any]], cases: list[dict[str, Any]]) -> list:
        return [[{**ln["result"], "params": ln["params"]}] for ln in lines if "result" in ln]

    def lost(
        self, method: str, case: dict[str, Any], index: int, lines: list, status: str, reason: str
    ) -> list[dict[str, Any]]:
        steps = [ln["step"] for ln in lines if ln.get("run") == index and "step" in ln]
        run = RunResult(method, case["beta"], case["dtype"], status, reason, steps=steps)
        return [run.to_dict()]

    def heard(self, method: str, lines: list[dict[str, Any]]) -> None:
        if self.on_model is not None and lines and "model" in lines[0]:
            self.on_model(lines[0]["model"])


def result(row: dict[str, Any]) -> RunResult:
    """A run's row as the sweep keeps it, with the weights its worker saved (loaded,
    then deleted: the parent holds them from here on)."""
    params = None
    if row.get("params"):
        params = torch.load(row["params"], weights_only=True)
        Path(row["params"]).unlink()
    return RunResult.from_dict(row, params)
