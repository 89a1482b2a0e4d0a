"""One writer per results file (it is rewritten whole: two writers keep only the last
one's rows): ``fcntl.flock`` on a hidden lock file beside it, taken through ``claim``
before the file is read or checked, held to the last write, gone with the process."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import IO


class FileLocked(ValueError):
    """Another process is writing the same results file (bad input: one line, exit 2)."""


class WriterLock:
    """Held from construction until ``release`` (or until the object is collected)."""

    def __init__(self, path: Path) -> None:
        path = Path(path)
        self.path = path.with_name(f".{path.name}.lock")
        self._file: IO[bytes] | None = None
        while True:
            handle = open(self.path, "ab")  # noqa: SIM115 - held open as the lock
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                raise FileLocked(
                    f"{path} is being written by another perfsuite process (lock {self.path}); "
                    "wait for it to finish, or write to another --out"
                ) from None
            # The holder before us may have removed the file between our open and our
            # lock: then we locked a name nobody else sees; try again on the new one.
            with suppress(FileNotFoundError):
                if os.stat(self.path).st_ino == os.fstat(handle.fileno()).st_ino:
                    self._file = handle
                    return
            handle.close()

    def release(self) -> None:
        """Remove the lock file, then let go (in that order: see the retry above)."""
        if self._file is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            self._file.close()
            self._file = None

    def __del__(self) -> None:
        self.release()


def claim(path: str | os.PathLike[str], start: Callable[[], object]) -> WriterLock:
    """``path``'s writer lock (its folder must exist), then ``start()``, whose checks of the
    file stay true while it is held (released if ``start`` raises). ``FileLocked`` (one
    line) when another process holds it or it cannot be taken."""
    try:
        writer = WriterLock(Path(path))
    except OSError as err:
        raise FileLocked(f"--out {path}: cannot lock it ({err.strerror})") from None
    try:
        start()
    except BaseException:
        writer.release()
        raise
    return writer
