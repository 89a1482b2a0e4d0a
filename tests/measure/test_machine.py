"""The busy-machine check (issue 20): a CPU burner beside a cell marks its rows, the
console warns, the provenance names the burner; the arithmetic on its own."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from perfsuite.cli import main
from perfsuite.measure.machine import BUSY_CORES, Snapshot, busy_reasons, cpu_state


def fake_snapshot(wall: float, machine: float, ours: float, cpu: dict | None = None) -> Snapshot:
    snap = Snapshot.__new__(Snapshot)
    snap.wall, snap.machine, snap.ours, snap.cpus = wall, machine, ours, {0, 1}
    snap.cpu = cpu or {}
    return snap


# pids no process has (above Linux's largest pid_max): neither ours nor pinned elsewhere
PYTHON, BASH, NEW = 2**23 + 1, 2**23 + 2, 2**23 + 3
_SHARE = re.compile(r"^other processes used ([\d.]+) of 2 cores over [\d.]+ s: (.*)$")


def _parts(reason: str) -> tuple[float, list[float]]:
    """The total and each named share of a CPU reason (names may repeat)."""
    total, listed = _SHARE.match(reason).groups()
    return float(total), [float(part.rsplit(" ", 1)[1]) for part in listed.split(", ")]


def test_other_processes_are_named_in_cores_that_add_up():
    """A 2-core box read "other processes used 1.4 of 2 cores (python 544%, …)": a shell
    that reaped a child gained its whole life's CPU time at once. Each named process is
    its own CPU time over the span, in the total's unit, and with the rest adds up to it."""
    start = fake_snapshot(
        100.0, 500.0, 50.0,
        {PYTHON: ("python", 30.0, 30.0, 7.0), BASH: ("bash", 2.0, 1.0, 8.0),
         NEW: ("make", 0.0, 0.0, 9.0)},
    )  # fmt: skip
    # 2 s: the cores were busy 4 s, 1.2 s of it ours: 2.8 core-s, 1.4 cores, others'.
    # python ran 1.6 core-s; bash 0.4 s itself and reaped a child of 10.4 s (5.4 cores);
    # make's pid now belongs to a new process (another start time): not compared.
    end = fake_snapshot(
        102.0, 504.0, 51.2,
        {PYTHON: ("python", 31.6, 31.6, 7.0), BASH: ("bash", 12.8, 1.4, 8.0),
         NEW: ("make", 9.0, 9.0, 99.0)},
    )  # fmt: skip
    state = cpu_state(start, end)
    assert state["other_cores"] == 1.4 and state["seconds"] == 2.0
    named = [(p["name"], p["cores"]) for p in state["other_processes"]]
    assert named == [("python", 0.8), ("bash", 0.2)]
    (reason,) = busy_reasons({"cpu": state})
    said = "other processes used 1.4 of 2 cores over 2.0 s: python 0.8, bash 0.2, the rest 0.4"
    assert reason == said
    total, shares = _parts(reason)
    assert sum(shares) == pytest.approx(total) and max(shares) <= total


def test_the_figures_shown_add_up_where_rounding_each_would_not():
    """0.34 + 0.34 + 0.72 = 1.4 cores, which rounded one by one read 0.3 + 0.3 + 0.7."""
    named = [{"name": "python", "cores": 0.34}, {"name": "bash", "cores": 0.34}]
    cpu = {"other_cores": 1.4, "cores": 2, "seconds": 2.0, "other_processes": named}
    (reason,) = busy_reasons({"cpu": cpu})
    assert reason.endswith("python 0.4, bash 0.3, the rest 0.7")
    total, shares = _parts(reason)
    assert sum(shares) == pytest.approx(total)
    # A total on a half tenth: printed 1.1, so the parts add up to 1.1, not round()'s 1.0.
    cpu = {**cpu, "other_cores": 1.05, "other_processes": [{"name": "python", "cores": 1.0}]}
    (reason,) = busy_reasons({"cpu": cpu})
    total, shares = _parts(reason)
    assert total == 1.1 and sum(shares) == pytest.approx(total)


def test_other_cpu_is_the_machines_less_ours_and_bounds_each_process_named():
    """Others' CPU is the cores' busy time less ours; time a process spent on cores not
    ours is not in it, so a process is named with at most the total."""
    start = fake_snapshot(0.0, 0.0, 0.0, {PYTHON: ("python", 0.0, 0.0, 1.0)})
    end = fake_snapshot(1.0, 0.6, 0.0, {PYTHON: ("python", 3.0, 3.0, 1.0)})
    (reason,) = busy_reasons({"cpu": cpu_state(start, end)})
    assert reason == "other processes used 0.6 of 2 cores over 1.0 s: python 0.6"
    start = fake_snapshot(0.0, 100.0, 10.0)
    # 10 s: the cores were busy 19 s, 10 s of it ours: 0.9 cores used by others
    busy = cpu_state(start, fake_snapshot(10.0, 119.0, 20.0))
    assert busy["other_cores"] == 0.9
    assert busy_reasons({"cpu": busy})[0].startswith("other processes used 0.9 of 2 cores")
    quiet = cpu_state(start, fake_snapshot(10.0, 111.0, 20.0))
    assert quiet["other_cores"] == 0.1 < BUSY_CORES and busy_reasons({"cpu": quiet}) == []


def test_gpu_throttle_bits_are_nvmls(monkeypatch):
    """NVML's bits: 0x4 is the software power cap (the H200 held it with ours back to back,
    reports/nvidia-h200/raw/13-sustained-clocks/), 0x2 application clocks set by hand."""
    from perfsuite.measure import machine

    for mask, throttle in (
        ("0x4", ["software power cap"]),
        ("0x2", []),
        ("0x41", ["hardware thermal slowdown"]),
    ):
        state = dict(zip(machine._GPU_FIELDS, ["1530", "1980", "65", mask], strict=True))
        monkeypatch.setattr(
            machine.provenance, "gpu_state", lambda fields, index, state=state: state
        )
        monkeypatch.setattr(machine.provenance, "smi", lambda *args, index: "")
        assert machine.gpu_state()["throttle"] == throttle, mask


def test_throttled_or_shared_gpu_is_busy():
    assert busy_reasons({"gpu": {"throttle": ["hardware thermal slowdown"]}})
    assert busy_reasons({"gpu": {"gpu_processes": [4242]}})
    assert busy_reasons({"gpu": {"sm_clock_mhz": 1980, "throttle": [], "gpu_processes": []}}) == []


@pytest.mark.integration
def test_a_cpu_burner_beside_a_cell_marks_it(tmp_path, capsys):
    out = tmp_path / "r.json"
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        argv = ["run", "--shape", "smoke", "--methods", "eager", "--phases", "fwd", "--beta", "0"]
        code = main([*argv, "--samples", "5", "--device", "cpu", "--out", str(out)])
    finally:
        burner.kill()
        burner.wait()
    assert code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "warning: busy machine" in text and "measured on a busy machine" in text
    document = json.loads(out.read_text())
    (row,) = document["rows"]
    assert row["busy"].startswith("other processes used")
    total, shares = _parts(row["busy"])  # in cores that add up, none beyond the box's 2
    assert shares and sum(shares) == pytest.approx(total)
    assert max(shares) <= total <= 2
    (group,) = document["env"]["machine"]["groups"]
    assert group["busy"] and group["cpu"]["other_cores"] >= BUSY_CORES
    assert burner.pid in [p["pid"] for p in group["cpu"]["other_processes"]]
    assert f"{row['median_ms']:.3g}!" in text  # the mark beside the time in the table


BURN = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"


@pytest.mark.integration
def test_a_workers_time_is_ours_unreaped_and_with_its_finished_children():
    """Its environment is gone once it exits; until the runner reaps it, its CPU time
    is neither in the runner's children's nor (before the fix) in ours: a quiet run
    read 'other processes used 4.4 of 2 cores (python3.11 148%)'. torch.compile's
    compile workers end inside a worker; their time moves into the worker's children's
    times, which must stay ours."""
    import psutil

    from perfsuite.measure import machine

    code = f"import subprocess, sys, time\nsubprocess.run([sys.executable, '-c', {BURN!r}])\n"
    code += "print('done', flush=True)\ntime.sleep(30)\n"
    worker = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = subprocess.Popen([sys.executable, "-c", BURN])
    try:
        proc = psutil.Process(child.pid)
        while proc.status() != psutil.STATUS_ZOMBIE:  # exited, not reaped
            time.sleep(0.01)
        assert machine._ours(child.pid)
        assert worker.stdout.readline().strip() == "done"
        seconds = machine._cpu_seconds()
        assert seconds[child.pid][1] >= 0.25 and seconds[worker.pid][1] >= 0.25
    finally:
        child.wait()
        worker.kill()
        worker.wait()
        worker.stdout.close()
