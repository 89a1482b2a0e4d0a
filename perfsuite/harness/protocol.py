"""The worker's side of the harness's protocol: JSON lines (rows and markers) appended to
the file its spec names, each synced as it is written."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from typing import Any


@contextmanager
def emitter(path: str | os.PathLike[str]) -> Iterator[Callable[[Any], None]]:
    """``emit(line)`` appends one line (a dict or a dataclass), synced: a worker killed
    right after loses none of it."""
    with open(path, "a", buffering=1) as out:

        def emit(line: Any) -> None:
            out.write(json.dumps(asdict(line) if is_dataclass(line) else line) + "\n")
            out.flush()
            os.fsync(out.fileno())

        yield emit
