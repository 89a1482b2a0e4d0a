"""Converge tests: Triton kernels (ours, liger) run on CPU only under the interpreter,
and ``@triton.jit`` reads ``TRITON_INTERPRET`` when a kernel is defined, so it is set
here, at collection, before any test imports them (as the converge entry does)."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
