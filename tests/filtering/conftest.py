"""The tile-list emulation is checked against ``perfsuite.kernels.tiles`` itself: under
Triton's interpreter on CPU, set (as tests/kernels/conftest.py does) before the kernels
are first imported."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
