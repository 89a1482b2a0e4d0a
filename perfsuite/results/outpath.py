"""One check, and one wording, for every output path a command is given, before any work
(a folder where a file goes, a file in the way, a folder that cannot be written)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


class OutputPathError(ValueError):
    """An output path that cannot be used (one line, exit code 2)."""


def _no_file_in_the_way(path: Path, flag: str) -> None:
    """Refuse ``path`` when its nearest existing ancestor is not a folder."""
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise OutputPathError(f"{flag} {path}: {parent} is a file, not a folder")


def _probe(folder: Path, flag: str, path: Path) -> None:
    """Create ``folder`` and write a file there, or say why not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as err:
        raise OutputPathError(f"{flag} {path}: cannot write there ({err.strerror})") from None


def check_output_file(
    path: str | os.PathLike[str],
    flag: str = "--out",
    *,
    overwrite: bool = True,
    inputs: Iterable[str | os.PathLike[str] | None] = (),
) -> Path:
    """``path`` can take a file: not a folder, not one of the command's ``inputs`` (even
    with ``overwrite``: the output would replace what it was made from), not an existing
    file unless ``overwrite``, in a folder that can be made and written. Makes the folder."""
    path = Path(path)
    if path.is_dir():
        raise OutputPathError(f"{flag} {path}: is a folder; give a file name")
    _no_file_in_the_way(path, flag)
    if path.exists() and any(
        p is not None and Path(p).exists() and path.samefile(p) for p in inputs
    ):
        raise OutputPathError(f"{flag} {path}: is an input; give another file name")
    if path.exists() and not overwrite:
        raise OutputPathError(f"{flag} {path}: exists; pass --force to overwrite it")
    _probe(path.parent, flag, path)
    return path


def check_output_dir(path: str | os.PathLike[str], flag: str = "-o") -> Path:
    """``path`` can take files: a folder (made if missing) that can be written."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{flag} {path}: is a file, not a folder")
    _no_file_in_the_way(path, flag)
    _probe(path, flag, path)
    return path
