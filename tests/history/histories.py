"""Results documents with a chosen history, for the history tests."""

from __future__ import annotations

import json
import shutil
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np

from perfsuite.cli import main
from perfsuite.history import store


def make_document(
    i: int, factor: float = 1.0, seed: int = 0, tp: int | None = None
) -> dict[str, Any]:
    """Run ``i`` of a one-cell history: 20 samples around 10 ms x ``factor`` (0.3 % noise);
    measured across ``tp`` ranks when given (no ``tp`` key otherwise, as before TP)."""
    rng = np.random.default_rng(seed * 1000 + i)
    samples = (10.0 * factor * (1 + rng.normal(0, 0.003, 20))).tolist()
    p20, median, p80 = np.percentile(samples, [20, 50, 80])
    row = {
        "method": "ours", "tokens": 8192, "vocab": 256000, "hidden": 2304, "dtype": "bf16",
        "beta": 0.0, "phase": "fwd", "status": "ok", "softcap": None, "shape": "gemma2-2b",
        "device": "cuda", "median_ms": float(median), "p20_ms": float(p20),
        "p80_ms": float(p80), "samples_ms": samples, "peak_bytes": 1 << 30, "workload": "random",
    }  # fmt: skip
    if tp is not None:
        row["tp"] = tp
    env = {
        "created": f"2026-01-01T00:{i:02d}:00Z",
        "git": {"sha": f"{i:02d}" + "ab" * 19, "dirty": False},
        "versions": {"torch": "2.13.0"},
        "device": {"kind": "cuda", "name": "Test CUDA"},
    }
    return {"schema_version": 1, "env": env, "rows": [row]}


def write_history(folder: Path, factors: list[float]) -> list[Path]:
    """One results file per run."""
    paths = [folder / f"run-{i:02d}.json" for i in range(len(factors))]
    for i, (path, factor) in enumerate(zip(paths, factors, strict=True)):
        path.write_text(json.dumps(make_document(i, factor)))
    return paths


def count(db_path: Path, table: str) -> int:
    with closing(store.connect(db_path)) as conn:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def blocks(out: str, head: str) -> list[str]:
    """The blocks of `history check` output that start with ``head``, each on one line
    (a block: its first line and the indented lines under it)."""
    found: list[list[str]] = []
    for line in out.splitlines():
        if line.startswith(" ") and found:
            found[-1].append(line.strip())
        else:
            found.append([line])
    return [" ".join(b) for b in found if b[0].startswith(head)]


REPO = Path(__file__).resolve().parents[2]


def committed_reports(dest: Path) -> Path:
    """A copy of the results files committed under ``reports/``, and only those: a user's
    ``perfsuite run`` writes into the git-ignored ``reports/runs/`` of the same checkout,
    and a test that imported the whole tree counted them (``assert 10 == 6``)."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z", "--", "reports"],
            capture_output=True,
            check=True,
        ).stdout.decode()
        tracked = [Path(p) for p in listed.split("\0") if p.endswith(".json")]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an sdist)
        tracked = [p.relative_to(REPO) for p in (REPO / "reports").rglob("*.json")]
        tracked = [p for p in tracked if p.parts[1] != "runs"]  # the ignored folder
    for path in tracked:
        if (REPO / path).is_file():  # a file deleted in the working tree is not there
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / path, dest / path)
    return dest / "reports"


def history(argv: list[str]) -> int:
    """``perfsuite history ARGV`` through the real entry point, as a user types it."""
    return main(["history", *argv])
