"""Converge's results files read back, those committed as version 1 too; the GPU
preset's dry run, quiet. The held-out table at 80 columns: tests/render/test_fit.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.converge.report import read

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted((ROOT / "reports").glob("converge-*/*.json"))


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_version_1_files_read_as_train_rows(path: Path):
    old = json.loads(path.read_text())
    assert old["schema"] == "perfsuite.converge/1"
    document = read(path)
    key = ("method", "beta", "dtype", "status", "steps", "heldout", "parity")
    assert [[r.get(k) for k in key] for r in document["rows"]] == [
        [r.get(k) for k in key] for r in old["runs"]
    ]
    assert {r["kind"] for r in document["rows"]} == {"train"}
    env = document["env"]
    assert env["git"] == old["environment"]["git"] and env["converge"]["preset"] == old["preset"]
    assert env.get("partial", False) is not old["complete"]


@pytest.mark.integration
def test_the_gpu_preset_plans_quietly_on_cpu(tmp_path: Path):
    """``python -m perfsuite converge --preset small`` (vocab 32k, for a GPU) only plans
    here, and prints no torchao `Failed to load ..._C_mxfp8...so` nor torch's `_pytree`
    enum warning, logged when transformers is first imported: only a fresh process shows
    them."""
    env = {k: v for k, v in os.environ.items() if k != "PERFSUITE_PLUGINS"}
    env["COLUMNS"] = "80"
    argv = ["converge", "--preset", "small", "--device", "cpu", "--dry-run"]
    argv += ["--out", str(tmp_path / "s.json")]
    how = dict(cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    proc = subprocess.run([sys.executable, "-m", "perfsuite", *argv], **how)
    assert proc.returncode == 0 and "dry run: nothing trained" in proc.stdout, proc.stderr
    printed = proc.stdout + proc.stderr
    assert "Failed to load" not in printed and "_pytree" not in printed, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(map(len, lines)) <= 80 and not any(line.endswith(" ") for line in lines)
    flat = " ".join(proc.stdout.split())  # lines fold at 80 columns
    assert "V=32768" in flat and "liger β=0.1 fp32: train under the Triton interpreter" in flat
    assert "torchtune-chunked β=0.1 fp32: unsupported" in flat
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("level", ["torchao", "torch.utils._pytree"])
def test_the_quieted_loggers_are_given_back(level):
    import logging

    from perfsuite.converge.model import quiet_imports

    logger = logging.getLogger(level)
    before = logger.level
    with quiet_imports():
        assert logger.level == logging.ERROR
    assert logger.level == before
