"""Keep a source checkout's root off ``sys.path``: its ``kernels/`` and ``baselines/`` are
other projects' names, and transformers' probe for Hugging Face's ``kernels`` imported
ours as a second copy (docs/development.md, "Layout")."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def drop_checkout_root() -> None:
    """Remove ``sys.path``'s entries naming the checkout's root ("" and "." too: the working
    directory); only from a source checkout, as site-packages may hold a real ``kernels``."""
    if not (ROOT / "pyproject.toml").is_file() or not (ROOT / "perfsuite/kernels").is_symlink():
        return
    for entry in list(sys.path):
        try:
            if Path(entry or os.getcwd()).resolve() == ROOT:
                sys.path.remove(entry)
        except OSError:  # a working directory that was removed: not the root
            pass
