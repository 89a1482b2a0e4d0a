"""The GPU's clocks during a cell's samples: nvidia-smi's loop parsed, a fake nvidia-smi
watched and stopped, nothing on CPU or without nvidia-smi, a slow row marked."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from fake_results import H100_ENV

from perfsuite.measure import clocks
from perfsuite.render.cells import CLOCK_MARK, cell_marks, mark_notes
from perfsuite.results.results import Row, load_results, new_document, write_results

# nvidia-smi's lines at the H200's power cap, and one at full clock (--format=csv,nounits).
CAPPED = "1530, 1980, 690.52, 0x0000000000000004"
FULL = "1965, 1980, 250.10, 0x0000000000000000"


def test_summary_of_the_samples():
    got = clocks.summarize([CAPPED, CAPPED, CAPPED, FULL, "[N/A], 1980, x, y", ""])
    assert got == {
        "samples": 4, "sm_clock_mhz": 1530.0, "sm_clock_min_mhz": 1530,
        "sm_clock_max_mhz": 1980, "power_max_w": 690.52,
        "throttled": {"software power cap": 0.75},
    }  # fmt: skip
    assert clocks.summarize([]) is None and clocks.summarize(["garbage"]) is None
    unread = clocks.summarize(["1410, 1410, [N/A], [N/A]"])  # a GPU that hides power
    assert unread["power_max_w"] is None and unread["throttled"] == {}


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An nvidia-smi that prints a capped sample every 20 ms until Ctrl-C; its argv saved."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(
        f"#!/bin/bash\necho \"$*\" > {tmp_path}/argv\ntrap 'exit 0' INT\n"
        f"while :; do echo '{CAPPED}'; sleep 0.02; done\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:/usr/bin:/bin")
    return tmp_path / "argv"


@pytest.mark.integration  # starts the fake nvidia-smi
def test_watches_a_cuda_device_while_the_block_runs(fake_smi: Path):
    with clocks.watch_clocks(torch.device("cuda")) as log:
        time.sleep(0.5)
    assert log.summary["samples"] >= 2 and log.summary["sm_clock_mhz"] == 1530
    assert log.summary["throttled"] == {"software power cap": 1.0}
    argv = fake_smi.read_text()
    assert "-lms 100" in argv and "-i 0" in argv and "clocks_throttle_reasons.active" in argv


def test_nothing_on_cpu_or_without_nvidia_smi(fake_smi: Path, monkeypatch: pytest.MonkeyPatch):
    with clocks.watch_clocks(torch.device("cpu")) as log:
        pass
    assert log.summary is None and not fake_smi.exists()
    monkeypatch.setenv("PATH", "/nonexistent")
    with clocks.watch_clocks(torch.device("cuda")) as log:
        pass
    assert log.summary is None


def test_a_row_timed_below_full_clock_is_marked_and_kept(tmp_path: Path):
    cell = dict(kind="loss", tokens=8, vocab=16, hidden=4, dtype="bf16", beta=0.1,
                phase="fwd+bwd", device="cuda", median_ms=67.5)  # fmt: skip
    slow = asdict(Row("ours", status="ok", clocks=clocks.summarize([CAPPED]), **cell))
    fast = asdict(Row("eager", status="ok", clocks=clocks.summarize([FULL]), **cell))
    assert cell_marks(slow, "fwd+bwd", False) == CLOCK_MARK
    assert cell_marks(fast, "fwd+bwd", False) == ""
    assert any(n.startswith(CLOCK_MARK) for n in mark_notes([slow, fast], known={}))
    path = tmp_path / "r.json"
    write_results(path, new_document(H100_ENV, [slow, fast]))
    assert load_results(path)["rows"][0]["clocks"]["sm_clock_mhz"] == 1530
