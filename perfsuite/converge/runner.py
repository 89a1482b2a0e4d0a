"""The train cell kind: a converge sweep's runs, each a (method, beta, dtype), trained by
``perfsuite.converge.worker`` processes through the harness (``perfsuite.harness``).

A method's crash, OOM kill or hang stays in its worker and costs the run it was on
(recorded as ``oom`` or ``error`` with the reason and the steps it had finished); a new
worker takes the method's remaining runs. Runs the parent can decide alone (the method
declares no loss to train with, is unavailable on the device, or cannot smooth at
beta > 0) are recorded without a worker, and never trained at another beta. The timeout is per run.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from perfsuite.converge.presets import Preset
from perfsuite.converge.train import RunResult
from perfsuite.converge.worker import WorkerSpec
from perfsuite.harness.kind import Kind
from perfsuite.method import Case, Method


@dataclass(frozen=True)
class Cell:
    """One run to make: a method at a beta in a dtype."""

    method: str
    beta: float
    dtype: str


def decided(method: Method, cell: Cell, preset: Preset, device: str) -> RunResult | None:
    """An ``unavailable``/``unsupported`` result when no worker is needed to know, else None."""
    status, reason = "unsupported", method.lacks("train")  # a method only across ranks
    if reason is None:
        status, reason = "unavailable", method.availability(device)
    if reason is None:
        case = Case(
            tokens=preset.tokens_per_step,
            vocab=preset.vocab,
            hidden=preset.hidden,
            dtype=cell.dtype,
            beta=cell.beta,
            device=device,
            z_loss=preset.z_loss,
        )
        status, reason = "unsupported", method.unsupported_reason(case)
    if reason is None:
        return None
    return RunResult(cell.method, cell.beta, cell.dtype, status=status, reason=reason)


def interpreted(method: Method, device: str) -> bool:
    return device == "cpu" and method.caps.triton


@dataclass
class TrainKind(Kind):
    """Training runs: a case is ``{"beta", "dtype"}`` (and the step's N, V, D, for the
    machine's state labels); its one row is the run's result."""

    methods: dict[str, Method]
    preset: Preset
    data: str
    device: str
    jobs: int
    timeout_s: float
    # Called with a worker's description of the model (every poll: keep the first).
    on_model: Callable[[dict[str, Any]], None] | None = None
    per_case = True

    def case(self, cell: Cell) -> dict[str, Any]:
        p = self.preset
        size = {"tokens": p.tokens_per_step, "vocab": p.vocab, "hidden": p.hidden}
        return {"beta": cell.beta, "dtype": cell.dtype, **size}

    def decided(self, method: str, case: dict[str, Any]) -> list[dict[str, Any]] | None:
        cell = Cell(method, case["beta"], case["dtype"])
        result = decided(self.methods[method], cell, self.preset, self.device)
        return None if result is None else [result.to_dict()]

    def interpreted(self, method: str) -> bool:
        return interpreted(self.methods[method], self.device)

    def cost(self, method: str) -> float:
        return self.methods[method].caps.interpreter_cost

    def command(self, method: str, cases: list[dict[str, Any]], out: Path, spec: Path) -> list[str]:
        runs = [{"beta": c["beta"], "dtype": c["dtype"]} for c in cases]
        worker = WorkerSpec(
            method, runs, self.preset.to_dict(), self.data, self.device, str(out), str(spec.parent)
        )
        spec.write_text(json.dumps(asdict(worker)))
        return [sys.executable, "-m", "perfsuite.converge.worker", str(spec)]

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
