"""Why a worker ended without finishing its cases, from what it left behind: its
JSON-lines output (cut at the first line a crash truncated), its stderr, its exit
code, and, for a multi-rank cell, the launcher's ``failed`` record naming the rank."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """A worker's JSON-lines output, up to the first line a crash cut short."""
    if not path.exists():
        return []
    lines = []
    for text in path.read_text().splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            break  # a line cut by a crash: everything before it stands
    return lines


# C++ log lines (torch profiler/kineto: "USDT:2026-01-01 10:00:00 1:1 Handler.cpp:52]
# profiler_start", glog's "W0101 10:00:00.000 1 file.cc:12] ..."): ours, not the user's.
_NATIVE_LOG = re.compile(r"\S+\.(?:cpp|cc|cxx|c|h|hpp):\d+\]")


def _user_lines(stderr: str) -> list[str]:
    """The worker's stderr without native libraries' log lines, blank lines dropped."""
    return [
        line
        for line in stderr.strip().splitlines()
        if line.strip() and not _NATIVE_LOG.search(line)
    ]


def death_reason(
    returncode: int | None, timed_out_after: float | None, stderr: str
) -> tuple[str, str]:
    """``(status, one-line reason)`` for a worker that ended without finishing its work;
    ``timed_out_after``: the limit (s) it was killed at, None if it was not."""
    tail = " | ".join(_user_lines(stderr)[-3:])[-400:]
    if timed_out_after is not None:
        return "error", f"worker timed out after {timed_out_after:g} s; {tail}".strip("; ")
    if returncode is not None and returncode < 0:
        sig = signal.Signals(-returncode).name
        if sig == "SIGKILL":
            return "oom", f"worker killed by SIGKILL (likely the kernel's OOM killer); {tail}"
        return "error", f"worker died of {sig}; {tail}"
    return "error", f"worker exited with code {returncode}; {tail}"


def failed_record(lines: list[dict[str, Any]]) -> tuple[str, str] | None:
    """``(status, reason)`` of the multi-rank launcher's ``{"failed": i, ...}`` line (the
    rank that failed first and why), when it wrote one."""
    for line in reversed(lines):
        if "failed" in line:
            return str(line["status"]), str(line["reason"])
    return None
