"""The GPU's clocks while a cell's samples run: nvidia-smi in its loop mode beside them.

The busy check's snapshots (``machine.py``) come before and after a cell group, when a GPU
that throttled itself has already recovered: the H200 held its 700 W cap through ours'
back-to-back calls at ~1,530 of 1,980 MHz and was off it half a second later
(reports/nvidia-h200/raw/13-sustained-clocks/). This watches the samples themselves, so a
row can say at what clock it was timed. docs/run.md, "Clocks during the samples"."""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from perfsuite.measure.machine import SLOWING_REASONS, gpu_index

if TYPE_CHECKING:
    import torch

FIELDS = "clocks.sm,clocks.max.sm,power.draw,clocks_throttle_reasons.active"
EVERY_MS = 100


class ClockLog:
    """What nvidia-smi printed while the block ran; ``summary`` once it has ended."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.summary: dict[str, Any] | None = None


def start_smi_loop(
    query: str, every_ms: int, stdout: Any, fmt: str = "csv,noheader,nounits"
) -> subprocess.Popen | None:
    """nvidia-smi printing ``query`` for this process's GPU every ``every_ms`` into
    ``stdout`` (its errors too), a line at a time, in its own process group (a killed
    run's session ends it); None where there is no nvidia-smi or it cannot start.
    ``stop_smi_loop`` ends it. ``.ci/gpu-run``'s clock log is one too."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    argv = [smi, f"--query-gpu={query}", f"--format={fmt}", "-lms", str(every_ms)]
    # A line at a time: stdio would hold 4 KiB (half a minute of lines) in a pipe or file.
    line_buffered = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []
    try:
        return subprocess.Popen(
            [*line_buffered, *argv, "-i", str(gpu_index())], stdout=stdout,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, process_group=0,
        )  # fmt: skip
    except OSError:
        return None


def stop_smi_loop(proc: subprocess.Popen) -> None:
    """Ctrl-C ends nvidia-smi's loop cleanly (its last lines written); killed if not."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2.0)
            return


@contextmanager
def watch_clocks(device: torch.device) -> Iterator[ClockLog]:
    """nvidia-smi sampling the GPU every ``EVERY_MS`` while the block runs (CUDA only; a
    log with no summary where nvidia-smi is missing or fails: never an error)."""
    log = ClockLog()
    proc = None
    if device.type == "cuda":
        proc = start_smi_loop(FIELDS, EVERY_MS, subprocess.PIPE)
    if proc is None:
        yield log
        return
    reader = threading.Thread(target=lambda: log.lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        yield log
    finally:
        stop_smi_loop(proc)
        reader.join(timeout=2.0)
        log.summary = summarize(log.lines)


def summarize(lines: list[str]) -> dict[str, Any] | None:
    """Median and lowest SM clock, its maximum, the highest power and the share of samples
    each slowing throttle reason was up; None without a sample."""
    rows = []
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        # The clocks are needed; a GPU may answer "[N/A]" for its power or throttle reasons.
        with suppress(ValueError, IndexError):
            clock, top = int(parts[0]), int(parts[1])
            watts = float(parts[2]) if parts[2].replace(".", "", 1).isdigit() else None
            mask = int(parts[3], 16) if parts[3].startswith("0x") else 0
            rows.append((clock, top, watts, mask))
    if not rows:
        return None
    powers = [r[2] for r in rows if r[2] is not None]
    shares = {
        text: round(sum(bool(r[3] & bit) for r in rows) / len(rows), 2)
        for bit, text in SLOWING_REASONS.items()
    }
    return {
        "samples": len(rows),
        "sm_clock_mhz": statistics.median(r[0] for r in rows),
        "sm_clock_min_mhz": min(r[0] for r in rows),
        "sm_clock_max_mhz": max(r[1] for r in rows),
        "power_max_w": max(powers) if powers else None,
        "throttled": {text: share for text, share in shares.items() if share},
    }
