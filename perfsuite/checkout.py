"""Keep a source checkout's root off ``sys.path``.

The checkout's top level holds ``kernels/`` and ``baselines/`` (imported as
``perfsuite.kernels`` and ``perfsuite.baselines`` through links). Both are other
projects' names: with the root on ``sys.path`` (``python -m pytest``, ``python -m
perfsuite`` or ``python -c`` run from it), transformers' probe for Hugging Face's
``kernels`` package imports ours as a top-level ``kernels``, a second copy of every
kernel module (issue 20). perfsuite itself never needs the root there: its own
modules resolve through the package, so the root is dropped when perfsuite loads.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def drop_checkout_root() -> list[str]:
    """Remove the entries of ``sys.path`` that name the checkout's root ("" and "."
    included, which mean the working directory); returns them. Only from a source
    checkout: site-packages may hold a real ``kernels`` that must stay importable."""
    if not (ROOT / "pyproject.toml").is_file() or not (ROOT / "perfsuite/kernels").is_symlink():
        return []
    dropped = []
    for entry in list(sys.path):
        try:
            same = Path(entry or os.getcwd()).resolve() == ROOT
        except OSError:  # a working directory that was removed
            continue
        if same:
            sys.path.remove(entry)
            dropped.append(entry)
    return dropped
