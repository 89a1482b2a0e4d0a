"""Running ``perfsuite step`` as a user types it, its console output kept."""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.cli import main
from perfsuite.results.results import load_results

QUICK = ["--layers", "1", "--seq", "4", "--batch", "1", "--samples", "2", "--warmup", "0"]
METHODS = "eager,ours,liger,cce,torchtune-chunked,one-file"


@dataclass
class Ran:
    code: int
    out: str  # stdout
    err: str  # stderr: error lines
    path: Path
    document: dict[str, Any] | None

    def rows(self, **match: Any) -> list[dict[str, Any]]:
        assert self.document is not None
        return [r for r in self.document["rows"] if all(r.get(k) == v for k, v in match.items())]


def step(argv: list[str], out: Path | None) -> Ran:
    """``perfsuite step ARGV`` as typed, its console output at 80 columns."""
    buffer, errors = io.StringIO(), io.StringIO()
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(errors):
            try:
                code = main(["step", *argv, *(["--out", str(out)] if out else [])])
            except SystemExit as exit:  # argparse's refusal of a bad value
                code = int(exit.code or 0)
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before
    wrote = code in (0, 1) and out is not None and out.exists()  # 2: refused, nothing written
    document = load_results(out) if wrote else None
    return Ran(code, buffer.getvalue(), errors.getvalue(), out or Path(), document)
