"""One smoke step run through the real entry point, shared by the tests that read it:
every method here (torch-compile is the slow tests'), β 0 and 0.1, and a real preset
too big for the memory limit beside it."""

from __future__ import annotations

import pytest

from step.stepping import METHODS, QUICK, Ran, step


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    out = tmp_path_factory.mktemp("step") / "smoke.json"
    # llama3.2-1b needs ~7 GiB: over 2G it is an oom row; smoke fits in far less.
    argv = ["--model", "smoke,llama3.2-1b", "--methods", METHODS, "--memory-limit", "2G"]
    return step([*argv, *QUICK], out)
