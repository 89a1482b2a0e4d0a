"""Kernel tests run on CUDA when present, else under Triton's CPU interpreter.

TRITON_INTERPRET must be set before ``triton.jit`` decorates the kernels, i.e.
before ``perfsuite.kernels`` is first imported; ``import torch`` does not import
triton, so checking for CUDA here is safe.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def device() -> str:
    return DEVICE


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
