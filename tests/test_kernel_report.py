"""Ahead-of-time compile of every shipped kernel config: none may fail or spill."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from perfsuite import kernel_report  # noqa: E402

pytestmark = pytest.mark.skipif(
    not os.path.exists(kernel_report._tool("ptxas")), reason="triton without NVIDIA tools"
)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return kernel_report.kernel_report(["sm_80", "sm_90a"])


def test_every_shipped_config_compiles_without_spills(rows):
    assert rows, "no kernels reported"
    assert {r["arch"] for r in rows} == {"sm_80", "sm_90a"}
    assert {r["kernel"].split("[")[0] for r in rows} == {"forward", "backward", "column_sum"}
    assert kernel_report.failures(rows) == []
    for r in rows:
        assert r["registers"] and r["registers"] <= 255
        assert r["stack_bytes"] == 0


def test_works_under_interpreter_env():
    """TRITON_INTERPRET=1 in the environment must not stop the AOT compile."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "perfsuite.kernel_report", "--arch", "sm_90a", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout)
    assert rows and all(r["ok"] for r in rows)


def test_cli_hooks(capsys):
    parser = argparse.ArgumentParser()
    kernel_report.add_arguments(parser)
    args = parser.parse_args(["--arch", "sm_80", "--json"])
    assert args.arch == "sm_80" and args.json
    assert parser.parse_args([]).arch == "sm_80,sm_90a"


def test_table_names_every_variant(rows, monkeypatch, capsys):
    """Variant names such as "[plain]" must not vanish as rich markup."""
    monkeypatch.setattr(kernel_report, "kernel_report", lambda archs: rows)
    parser = argparse.ArgumentParser()
    kernel_report.add_arguments(parser)
    assert kernel_report.run(parser.parse_args([])) == 0
    text = capsys.readouterr().out
    for variant in {r["variant"] for r in rows}:
        assert f" {variant} " in text
    assert "N64-V64-D32x32-w8-s3" in text  # not squeezed to 80 columns in a log
