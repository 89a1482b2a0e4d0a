"""Temporary folders for worker specs and rows, named after the pid that made them: the
next run removes those a SIGKILLed run (the OOM killer, a CI timeout) left."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import psutil

PREFIX = "perfsuite-run-"


def _stale(folder: Path) -> bool:
    pid = folder.name[len(PREFIX) :].split("-")[0]
    try:
        mine = folder.stat().st_uid == os.getuid()
    except OSError:
        return False
    return pid.isdigit() and mine and not psutil.pid_exists(int(pid))


def remove_stale() -> list[Path]:
    """Remove the folders of runs whose process is gone; returns them."""
    gone = [d for d in Path(tempfile.gettempdir()).glob(f"{PREFIX}*") if d.is_dir() and _stale(d)]
    for folder in gone:
        shutil.rmtree(folder, ignore_errors=True)
    return gone


def remove_own() -> None:
    """Remove this process's folders (after an interrupt: one whose ``with`` it cut short)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}{os.getpid()}-*"):
        shutil.rmtree(folder, ignore_errors=True)


def scratch() -> tempfile.TemporaryDirectory:
    """A folder for one method's workers, named after this process."""
    remove_stale()
    return tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}-")
