"""Every status the suite reports, each provoked by a real worker process."""

from __future__ import annotations

import pytest

from perfsuite.plan import build_plan
from perfsuite.runner import run_plan
from perfsuite.shapes import Shape

TINY = Shape("tiny", 32, 300, 24, dtype="fp32")


def _run(methods: str, betas: str = "0", shape: Shape = TINY, **kw):
    plan = build_plan(
        shapes=[shape], methods=methods, betas=betas, device="cpu", samples=3, warmup=1, **kw
    )
    return run_plan(plan)["rows"]


def _status(rows, method, beta=0.0):
    found = {r["status"] for r in rows if r["method"] == method and r["beta"] == beta}
    assert len(found) == 1, found
    return found.pop()


def test_ok_rows_carry_timing_memory_and_errors():
    rows = _run("eager", betas="0,0.1")
    assert len(rows) == 6
    for row in rows:
        assert row["status"] == "ok", row["reason"]
        assert len(row["samples_ms"]) == 3
        assert row["p20_ms"] <= row["median_ms"] <= row["p80_ms"]
        assert row["peak_bytes"] > 0 and row["peak_abs_bytes"] > row["peak_bytes"]
        assert row["max_abs_err"] <= max(row["tolerance"].values())
        assert not row["interpreted"]


def test_wrong_unsupported_unavailable_error(fake_plugins):
    rows = _run("fake-wrong,fake-no-smoothing,fake-missing-package,fake-raises", betas="0,0.1")
    assert _status(rows, "fake-wrong") == "wrong"
    wrong = next(r for r in rows if r["method"] == "fake-wrong")
    assert "loss error" in wrong["reason"] and wrong["median_ms"] is None  # never timed
    assert _status(rows, "fake-no-smoothing", 0.0) == "ok"
    assert _status(rows, "fake-no-smoothing", 0.1) == "unsupported"
    unsupported = next(r for r in rows if r["method"] == "fake-no-smoothing" and r["beta"] == 0.1)
    assert "no label smoothing" in unsupported["reason"] and unsupported["median_ms"] is None
    assert _status(rows, "fake-missing-package") == "unavailable"
    missing = next(r for r in rows if r["method"] == "fake-missing-package")
    assert missing["reason"] == "perfsuite_no_such_package not installed"
    assert _status(rows, "fake-raises") == "error"
    assert "deliberate failure" in next(r for r in rows if r["method"] == "fake-raises")["reason"]


def test_crash_loses_only_its_case(fake_plugins):
    rows = _run("fake-crash,eager", betas="0,0.1,1")
    assert _status(rows, "fake-crash", 0.0) == "ok"
    assert _status(rows, "fake-crash", 0.1) == "error"
    assert (
        "SIGSEGV"
        in next(r for r in rows if r["method"] == "fake-crash" and r["beta"] == 0.1)["reason"]
    )
    # The worker restarted after the crash, so the next case was still measured.
    assert _status(rows, "fake-crash", 1.0) == "error"
    assert _status(rows, "eager", 1.0) == "ok"


def test_out_of_memory_is_reported_as_oom():
    big = Shape("big", 2048, 8192, 32, dtype="fp32")  # 64 MiB of logits per copy
    rows = _run("eager", shape=big, memory_limit=16 << 20)
    assert _status(rows, "eager") == "oom"
    assert "allocate" in rows[0]["reason"]


@pytest.mark.parametrize("phase", ["fwd", "bwd", "fwd+bwd"])
def test_phase_subset(phase):
    rows = _run("eager", phases=phase)
    assert [r["phase"] for r in rows] == [phase]
