"""Is the machine busy? Two snapshots bracket each cell group: on CPU the kernel's busy
time on our cores (/proc/stat) less our processes' (this one and those started with
``RUN_ID_VAR`` set to its pid); on CUDA the SM clock, temperature, throttle reasons and
other processes (nvidia-smi). docs/run.md, "A busy machine", says why."""

from __future__ import annotations

import os
import time
from contextlib import suppress
from typing import Any

import psutil

from perfsuite.results import provenance

RUN_ID_VAR = "PERFSUITE_RUN_PID"
# Other processes using this much of one core or more, over a group, make it busy.
BUSY_CORES = 0.5
# A process listed as "other busy" uses at least this share of one core.
LISTED_SHARE = 0.1
_GPU_FIELDS = ("clocks.sm", "clocks.max.sm", "temperature.gpu", "clocks_throttle_reasons.active")
# Throttle reasons (NVML's nvmlClocksEventReason bits) that slow a kernel: not idle (0x1),
# not application clocks set by hand (0x2), not sync boost (0x10) or display clocks (0x100).
SLOWING_REASONS = {
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "power brake",
}


def _cpu_seconds() -> dict[int, tuple[str, float, float, float]]:
    """pid -> (name, CPU seconds with its reaped children's, its own, start time) of every
    visible process: ours count our finished compile workers; another is listed by its
    own, since a shell that reaps its children gains their whole lives' time at once."""
    out = {}
    for proc in psutil.process_iter(["name", "cpu_times", "create_time"]):
        t = proc.info.get("cpu_times")
        if t is not None:
            own = t.user + t.system
            seconds = own + t.children_user + t.children_system
            started = proc.info.get("create_time") or 0.0
            out[proc.pid] = (proc.info.get("name") or "?", seconds, own, started)
    return out


def _ours(pid: int) -> bool:
    """This process, or one started by this run (its env carries our pid; an unreaped
    worker has no env left, but is still our child)."""
    if pid == os.getpid():
        return True
    with suppress(psutil.Error, OSError):  # gone or hidden: not ours
        proc = psutil.Process(pid)
        with suppress(psutil.Error, OSError):  # no env left to read
            return proc.environ().get(RUN_ID_VAR) == str(os.getpid())
        return proc.ppid() == os.getpid()
    return False


def _busy_seconds(cpus: set[int]) -> float:
    """CPU seconds the kernel spent not idle on ``cpus``, whoever ran (other containers and
    the hypervisor's steal included)."""
    per_cpu = psutil.cpu_times(percpu=True)
    total = 0.0
    for t in (per_cpu[i] for i in cpus if i < len(per_cpu)):
        total += sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0)
        total -= getattr(t, "guest_nice", 0.0)  # already counted in user / nice
    return total


class Snapshot:
    """CPU times at one moment (the machine's, ours, each visible process's)."""

    def __init__(self) -> None:
        self.wall = time.monotonic()
        self.cpus = os.sched_getaffinity(0)
        self.machine = _busy_seconds(self.cpus)
        self.cpu = _cpu_seconds()
        # This process and its finished children (workers), and its running workers.
        self.ours = sum(s for pid, (_, s, *_) in self.cpu.items() if _ours(pid))


def other_cores(start: Snapshot, end: Snapshot, elapsed: float) -> float:
    """Cores others kept busy over ``elapsed`` seconds: the machine's busy time less ours."""
    return max(0.0, (end.machine - start.machine) - (end.ours - start.ours)) / elapsed


def _on_our_cores(pid: int, cpus: set[int]) -> bool:
    """Whether a process may run on ``cpus``: one pinned elsewhere used none of them."""
    try:
        return bool(set(psutil.Process(pid).cpu_affinity()) & cpus)
    except (psutil.Error, OSError, AttributeError):  # gone, hidden, or no affinity here
        return True


def cpu_state(start: Snapshot, end: Snapshot) -> dict[str, Any]:
    """Load average, cores, and the cores others used between two snapshots on average
    (``other_cores``); each process named in the same unit, at most the total."""
    # CPU times tick at 10 ms: over a short case that alone would read as a share.
    elapsed = max(end.wall - start.wall, 0.5)
    total = other_cores(start, end, elapsed)
    others = []
    for pid, (name, _, own, started) in end.cpu.items():
        before = start.cpu.get(pid)
        if before is None or before[3] != started:  # new, or its pid reused
            continue
        share = min((own - before[2]) / elapsed, total)
        if share >= LISTED_SHARE and not _ours(pid) and _on_our_cores(pid, end.cpus):
            others.append({"pid": pid, "name": name, "cores": round(share, 2)})
    others.sort(key=lambda p: -p["cores"])
    return {
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cores": len(end.cpus),
        "seconds": round(end.wall - start.wall, 2),
        "other_cores": round(total, 2),
        "other_processes": others[:5],
    }


def gpu_index() -> int:
    """nvidia-smi's index of the GPU this process uses (the first visible one)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(visible) if visible.isdigit() else 0


def gpu_state() -> dict[str, Any] | None:
    """The GPU's clocks, temperature, throttling and other processes; None if unknown."""
    index = gpu_index()
    state = provenance.gpu_state(_GPU_FIELDS, index)
    apps = provenance.smi("--query-compute-apps=pid", "--format=csv,noheader", index=index) or ""
    try:
        *numbers, mask = (state or {}).values()
        clock, top, temp = map(int, numbers)
        reasons = int(mask, 16)
    except ValueError:  # none, or unread
        return None
    pids = [int(p) for p in apps.split() if p.isdigit()]
    return {
        "sm_clock_mhz": clock,
        "sm_clock_max_mhz": top,
        "temperature_c": temp,
        "throttle": [text for bit, text in SLOWING_REASONS.items() if reasons & bit],
        "gpu_processes": [p for p in pids if not _ours(p)],
    }


def busy_reasons(state: dict[str, Any]) -> list[str]:
    """Why a state is busy, in words ([] when quiet)."""
    reasons = []
    cpu = state.get("cpu") or {}
    if cpu.get("other_cores", 0.0) >= BUSY_CORES:
        reasons.append(_other_cpu(cpu))
    gpu = state.get("gpu") or {}
    if gpu.get("throttle"):
        reasons.append(f"GPU throttled ({', '.join(gpu['throttle'])})")
    if gpu.get("gpu_processes"):
        reasons.append(f"other processes on the GPU: {gpu['gpu_processes']}")
    return reasons


def _other_cpu(cpu: dict[str, Any]) -> str:
    """ "other processes used 1.4 of 2 cores over 3.2 s: python 0.8, bash 0.4, the rest 0.2":
    the parts add up to the total as printed."""
    total = cpu["other_cores"]
    seconds = cpu.get("seconds")
    span = "" if seconds is None else f" over {seconds:.{1 if seconds < 10 else 0}f} s"
    shown_total = f"{total:.1f}"
    text = f"other processes used {shown_total} of {cpu['cores']} cores{span}"
    named = cpu.get("other_processes", [])[:3]
    if not named:
        return text
    cores = [p["cores"] for p in named]
    # The tenths of the total as printed: round(10.5) is 10 where 1.05 prints 1.1.
    tenths = round(float(shown_total) * 10)
    shown = _tenths_adding_up([*cores, max(total - sum(cores), 0.0)], tenths)
    parts = [f"{p['name']} {t / 10:.1f}" for p, t in zip(named, shown, strict=False)]
    if shown[-1]:
        parts.append(f"the rest {shown[-1] / 10:.1f}")
    return f"{text}: {', '.join(parts)}"


def _tenths_adding_up(values: list[float], total: int) -> list[int]:
    """``values`` in tenths adding up to ``total`` tenths: each rounded down, the tenths
    short handed to the largest remainders."""
    floors = [int(v * 10) for v in values]
    order = sorted(range(len(values)), key=lambda i: values[i] * 10 - floors[i], reverse=True)
    for i in order[: max(total - sum(floors), 0)]:
        floors[i] += 1
    return floors


class Watch:
    """Brackets cell groups: ``end(label)`` returns the group's state since the last."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.snapshot = Snapshot()
        self.gpu_before = gpu_state() if device == "cuda" else None

    def end(self, label: str) -> dict[str, Any]:
        now = Snapshot()
        state: dict[str, Any] = {
            "group": label,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpu": cpu_state(self.snapshot, now),
        }
        if self.device == "cuda":
            state["gpu_start"], state["gpu"] = self.gpu_before, gpu_state()
        state["busy"] = busy_reasons(state) + [
            f"at start: {r}" for r in busy_reasons({"gpu": state.get("gpu_start")})
        ]
        self.snapshot, self.gpu_before = now, state.get("gpu")
        return state


def document_busy(document: dict[str, Any]) -> str:
    """Why a results document was measured on a busy machine: how many of its groups
    were, and the first reason ("" when quiet, or not recorded)."""
    groups = (document["env"].get("machine") or {}).get("groups", [])
    busy = [g for g in groups if g.get("busy")]
    if not busy:
        rows = [r for r in document["rows"] if r.get("busy")]
        return f"{len(rows)} row(s) busy: {rows[0]['busy']}" if rows else ""
    return f"{len(busy)} of {len(groups)} cell groups busy, e.g. {busy[0]['busy'][0]}"


def refuse_busy(base: dict[str, Any], current: dict[str, Any], labels: tuple[str, str]) -> str:
    """The refusal to judge time between two runs when either was measured busy ("" when
    both were quiet)."""
    pairs = zip(labels, (base, current), strict=True)
    busy = [f"{label}: {why}" for label, doc in pairs if (why := document_busy(doc))]
    if not busy:
        return ""
    advice = "measure again on a quiet machine, or pass --accept-busy to judge time anyway"
    if len(busy) == 2:  # "states differ" was untrue of one busy file against itself
        what, load = "both runs were measured on a busy machine", "could be the load"
    else:
        what, load = "machine states differ", "would be the other load"
    return f"{what} ({'; '.join(busy)}): a time difference {load}, not the code; {advice}"
