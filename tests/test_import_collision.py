"""Our top-level ``kernels/`` is not Hugging Face's ``kernels`` (issue 20): with the
checkout's root on ``sys.path`` (``python -m pytest`` and ``-m perfsuite`` put it there),
transformers' probe imported ours. perfsuite drops the root when it loads; these tests
import transformers, then run a Triton method, in interpreters started from the root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("transformers")

# Run as a test module of its own, from the root, by the README's `python -m pytest`.
INNER = """
import sys
from pathlib import Path

import torch
import transformers
from transformers import LlamaForCausalLM  # probes for Hugging Face's `kernels`


def test_transformers_then_a_triton_method():
    assert transformers.utils.is_kernels_available() is False
    mod = sys.modules.get("kernels")
    assert mod is None or not str(getattr(mod, "__file__", "")).startswith("{root}"), mod
    from perfsuite.kernels import linear_cross_entropy

    torch.manual_seed(0)
    e = torch.randn(16, 32, requires_grad=True)
    c = torch.randn(64, 32, requires_grad=True)
    t = torch.randint(0, 64, (16,))
    loss = linear_cross_entropy(e, c, t, label_smoothing=0.1)
    ref = torch.nn.functional.cross_entropy(e @ c.T, t, label_smoothing=0.1)
    torch.testing.assert_close(loss, ref)
    assert LlamaForCausalLM is not None
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    return {**env, "TRITON_INTERPRET": "1", "PYTHONDONTWRITEBYTECODE": "1"}


@pytest.mark.slow  # 7-30 s of ranks, workers or compiles here; `-m slow` runs it
def test_pytest_from_the_root_keeps_our_kernels_to_ourselves():
    inner = ROOT / "tests" / "_collision_probe_test.py"  # under tests/: its conftest applies
    inner.write_text(INNER.replace("{root}", str(ROOT / "kernels")))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(inner)],
            cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    finally:
        inner.unlink()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout


@pytest.mark.integration
def test_python_from_the_root_after_importing_perfsuite():
    """`python -c` / `python -m perfsuite` from the root: perfsuite loads first there."""
    code = (
        "import sys, perfsuite\n"
        "from transformers import LlamaForCausalLM\n"
        "mod = sys.modules.get('kernels')\n"
        f"assert mod is None or {str(ROOT / 'kernels')!r} not in str(mod), mod\n"
        "print('clean')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0 and "clean" in proc.stdout, proc.stderr[-2000:]
