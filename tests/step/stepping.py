"""Running ``perfsuite step`` as a user types it, its console output kept."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from perfsuite.cli import main
from perfsuite.harness.worker import emitter
from perfsuite.results.results import load_results

QUICK = ["--layers", "1", "--seq", "4", "--batch", "1", "--samples", "2", "--warmup", "0"]
METHODS = "eager,ours,liger,cce,torchtune-chunked,one-file"
HERE = ["eager", "torchtune-chunked"]  # the smoke run serves their cases itself (served_here)


@dataclass
class Ran:
    code: int
    out: str  # stdout
    err: str  # stderr: error lines
    path: Path
    document: dict[str, Any] | None

    def rows(self, **match: Any) -> list[dict[str, Any]]:
        assert self.document is not None
        return [r for r in self.document["rows"] if all(r.get(k) == v for k, v in match.items())]


def step(argv: list[str], out: Path | None) -> Ran:
    """``perfsuite step ARGV`` as typed, its console output at 80 columns."""
    buffer, errors = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, COLUMNS="80"), contextlib.redirect_stdout(buffer):
        with contextlib.redirect_stderr(errors):
            try:
                code = main(["step", *argv, *(["--out", str(out)] if out else [])])
            except SystemExit as exit:  # argparse's refusal of a bad value
                code = int(exit.code or 0)
    wrote = code in (0, 1) and out is not None and out.exists()  # 2: refused, nothing written
    document = load_results(out) if wrote else None
    return Ran(code, buffer.getvalue(), errors.getvalue(), out or Path(), document)


def served_here(mp: pytest.MonkeyPatch, kind: str, names: list[str], tmp: Path) -> None:
    """``names``' cases run in this process by the ``kind`` class's (dotted) worker module's
    ``WORKER``, as if decided in the parent: ~7 CPU-s of imports saved a worker, the other
    methods' workers testing the process around those functions."""
    module, _, name = kind.rpartition(".")
    decided = getattr(importlib.import_module(module), name).decided

    def here(self: Any, method: str, case: dict[str, Any]) -> list[dict[str, Any]] | None:
        if (rows := decided(self, method, case)) is not None or method not in names:
            return rows
        (out := tmp / "served.lines").unlink(missing_ok=True)
        worker, path = self.command(method, [case], out, tmp / "served.json")[-2:]
        served = importlib.import_module(worker).WORKER  # as harness.worker.serve runs it
        spec = served.spec_type(**json.loads(Path(path).read_text()))
        with emitter(out) as write, served.session(spec, write) as (state, emit):
            served.run_case(spec, state, 0, spec.cases[0], emit, lambda stage: None)
        return self.finished([json.loads(x) for x in out.read_text().splitlines()], [case])[0]

    mp.setattr(f"{kind}.decided", here)
