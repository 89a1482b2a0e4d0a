"""The train cell kind: each (method, beta, dtype) run trained in a
``perfsuite.converge.worker`` process through the harness, its one row a ``RunResult``'s."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from perfsuite.converge.presets import Preset
from perfsuite.converge.train import RunResult
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
    """Training runs; a case is its loss's ``Case`` (N, V, D label the machine's state)."""

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
        p, beta, dtype = self.preset, cell.beta, cell.dtype
        size = dict(tokens=p.tokens_per_step, vocab=p.vocab, hidden=p.hidden, z_loss=p.z_loss)
        return dict(beta=beta, dtype=dtype, device=self.device, **size)

    def status_rows(
        self, method: str, case: dict[str, Any], phases: Collection[str], status: str, reason: str
    ) -> list[dict[str, Any]]:
        return [RunResult(method, case["beta"], case["dtype"], status, reason).to_dict()]

    def command(self, method: str, cases: list[dict[str, Any]], out: Path, spec: Path) -> list[str]:
        runs = [{"beta": c["beta"], "dtype": c["dtype"]} for c in cases]
        worker = WorkerSpec(method, runs, asdict(self.preset), self.data, self.device, str(out))
        spec.write_text(json.dumps(asdict(worker)))
        return python_worker("perfsuite.converge.worker", str(spec))

    def finished(self, lines: list[dict[str, Any]], cases: list[dict[str, Any]]) -> list:
        return [[{**ln["result"], "params": ln["params"]}] for ln in lines if "result" in ln]

    def lost(
        self, method: str, case: dict[str, Any], index: int, lines: list, status: str, reason: str
    ) -> list[dict[str, Any]]:
        (row,) = self.status_rows(method, case, (), status, reason)
        row["steps"] = [ln["step"] for ln in lines if ln.get("run") == index and "step" in ln]
        return [row]

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
    return RunResult(**{**row, "params": params})
