"""One smoke step run through the real entry point, shared by the tests that read it:
every method here (torch-compile is the slow tests'), β 0 and 0.1, and a real preset
too big for the memory limit beside it. Under xdist the first worker to ask runs it and
the others read what it left (a session fixture is per worker: it ran twice)."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from perfsuite.results.results import load_results
from step.stepping import METHODS, QUICK, Ran, step


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's
    out, said = shared / "step-smoke.json", shared / "step-smoke.console.json"
    with open(shared / "step-smoke.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if said.exists():
            ran = json.loads(said.read_text())
            document = load_results(out) if out.exists() else None
            return Ran(ran["code"], ran["out"], ran["err"], Path(out), document)
        # llama3.2-1b needs ~7 GiB: over 2G it is an oom row; smoke fits in far less.
        argv = ["--model", "smoke,llama3.2-1b", "--methods", METHODS, "--memory-limit", "2G"]
        ran = step([*argv, *QUICK], out)
        said.write_text(json.dumps({"code": ran.code, "out": ran.out, "err": ran.err}))
        return ran
