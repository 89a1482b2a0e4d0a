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


def is_checkout(root: Path = ROOT) -> bool:
    """Whether ``root`` is a source checkout (not site-packages, where a real
    ``kernels`` package may live and must stay importable)."""
    return (root / "pyproject.toml").is_file() and (root / "perfsuite" / "kernels").is_symlink()


def drop_checkout_root(path: list[str] | None = None) -> list[str]:
    """Remove the entries of ``path`` (default ``sys.path``) that name the checkout's
    root ("" and "." included, which mean the working directory); returns them."""
    path = sys.path if path is None else path
    if not is_checkout():
        return []
    dropped = []
    for entry in list(path):
        try:
            same = Path(entry or os.getcwd()).resolve() == ROOT
        except OSError:  # a working directory that was removed
            continue
        if same:
            path.remove(entry)
            dropped.append(entry)
    return dropped
