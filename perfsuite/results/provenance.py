"""Where a number came from: code, library versions, device and its state."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
import time
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path
from typing import Any

CORE_DISTRIBUTIONS = ("perfsuite", "torch", "triton", "pandas", "rich")
_SMI_FIELDS = ("name", "memory.total", "driver_version", "clocks.sm", "clocks.mem",
               "clocks.max.sm", "temperature.gpu", "power.draw")  # fmt: skip


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_state() -> dict[str, Any]:
    """SHA and dirty flag of the checkout perfsuite runs from (None outside git); when
    dirty, ``diff`` fingerprints the uncommitted changes (sha256 of ``git diff HEAD``)."""
    here = Path(__file__).resolve().parent
    sha = _run(["git", "rev-parse", "HEAD"], cwd=here)
    if sha is None:
        return {"sha": None, "dirty": None}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here)
    if not status:
        return {"sha": sha, "dirty": False}
    diff = _run(["git", "diff", "HEAD", "--binary"], cwd=here)
    fingerprint = None if diff is None else hashlib.sha256(diff.encode()).hexdigest()[:16]
    return {"sha": sha, "dirty": True, "diff": fingerprint}


def cpu_model() -> str:
    with suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def smi(*query: str, index: int = 0) -> str | None:
    """What nvidia-smi answers ``query`` for GPU ``index`` (None: no nvidia-smi, no GPU)."""
    return _run(["nvidia-smi", *query, "-i", str(index)])


def gpu_state(fields: tuple[str, ...] = _SMI_FIELDS, index: int = 0) -> dict[str, str] | None:
    """nvidia-smi's ``fields`` of GPU ``index``: by default name, memory, driver, clocks,
    temperature."""
    out = smi(f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", index=index)
    if not out:
        return None
    return dict(zip(fields, (v.strip() for v in out.splitlines()[0].split(",")), strict=False))


def device_info(device: str) -> dict[str, Any]:
    if device == "cuda":
        import torch  # here: compare and baseline read provenance without paying for torch

        smi = gpu_state() or {}
        name = smi.get("name") or torch.cuda.get_device_name(0)
        return {
            "kind": "cuda",
            "name": name,
            "memory_mib": smi.get("memory.total"),
            "driver": smi.get("driver_version"),
            "cuda": torch.version.cuda,
        }
    return {
        "kind": "cpu",
        "name": cpu_model(),
        "cores": os.cpu_count(),
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
    }


def device_slug(env: dict[str, Any]) -> str:
    """A filesystem-safe name for the device a results file was measured on."""
    name = str(env.get("device", {}).get("name", "unknown")).lower()
    return re.sub(r"[\W_]+", "-", name).strip("-") or "unknown"  # [\W_]: not isalnum()


def collect_env(device: str, distributions: Iterable[str] = ()) -> dict[str, Any]:
    from perfsuite.method import package_version  # torch: only a run collects provenance

    names = dict.fromkeys([*CORE_DISTRIBUTIONS, *distributions])
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git": git_state(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {name: package_version(name) for name in names},
        "device": device_info(device),
        "gpu_state_before": gpu_state() if device == "cuda" else None,
    }
