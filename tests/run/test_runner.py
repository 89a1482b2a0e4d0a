"""Every status the suite reports, each provoked by a real worker process."""

from __future__ import annotations

import subprocess
import threading
import time
import types

import pytest
from plugins import use_plugins

from perfsuite.harness import environment, lifecycle
from perfsuite.harness import kind as harness
from perfsuite.harness.command import Checkpoint
from perfsuite.harness.environment import THREAD_VARS, child_env
from perfsuite.harness.lifecycle import Ended
from perfsuite.measure.timing import INTERPRETED_SAMPLES
from perfsuite.plan.plan import build_plan
from perfsuite.plan.shapes import Shape
from perfsuite.run import runner
from perfsuite.run.runner import LossKind, run_plan

TINY = Shape("tiny", 32, 300, 24, dtype="fp32")
# A worker each (fake-crash two); the parent decides fake-missing-package and
# fake-broken-import's β 0.1 without one. A wrong row: test_training_terms_are_gated_...
MIXED = (
    "eager,fake-interpreted,fake-missing-package,fake-raises,fake-crash,fake-broken-import,"
    "fake-refuses"
)


def _run(methods: str, betas: str = "0", shape: Shape = TINY, **kw):
    plan = build_plan(
        shapes=[shape], methods=methods, betas=betas, device="cpu", samples=3, warmup=1, **kw
    )
    return run_plan(plan)["rows"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """One run of every status (β 0.1 first: rows keep the case order), checkpointed,
    with its progress lines: (final document, partial documents written, events)."""
    seen: list[dict] = []
    events: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        use_plugins(mp, "plugins.fake_methods")
        plan = build_plan(
            shapes=[TINY], methods=MIXED, betas="0.1,0", device="cpu", samples=3, warmup=1,
            jobs=2,
        )  # fmt: skip
        mp.setattr("perfsuite.harness.command.write_results", lambda _, d: seen.append(d))
        checkpoint = Checkpoint(tmp_path_factory.mktemp("runner") / "r.json")
        done = lambda method, case, rows: events.append(f"{method} done")  # noqa: E731
        final = run_plan(plan, done, checkpoint=checkpoint, notice=events.append)
        checkpoint.writer.release()
    return final, seen, events


def _row(rows, method, beta=0.0):
    return next(r for r in rows if r["method"] == method and r["beta"] == beta)


def test_markers_are_not_rows_and_a_lost_case_keeps_its_rows():
    plan = build_plan(shapes=[TINY], methods="eager", betas="0", device="cpu")
    kind, (case,) = runner.LossKind(plan), plan.cases()
    rows = kind.status_rows("eager", case, plan.phases, "ok", "")
    lines = [{"start": 0}, {"stage": "gate", "case": 0}, *rows[:2], {"failed": 0, "status": "x"}]
    assert kind.finished(lines, [case]) == [] and kind.finished([*lines, rows[2]], [case]) == [rows]
    lost = kind.lost("eager", case, 0, lines, "error", "died")
    assert lost[:2] == rows[:2] and (lost[2]["status"], lost[2]["reason"]) == ("error", "died")


@pytest.mark.integration
def test_ok_rows_carry_timing_memory_and_errors(mixed):
    rows = [r for r in mixed[0]["rows"] if r["method"] == "eager"]
    assert len(rows) == 6
    for row in rows:
        assert row["status"] == "ok", row["reason"]
        assert len(row["samples_ms"]) == 3
        assert row["p20_ms"] <= row["median_ms"] <= row["p80_ms"]
        assert row["peak_bytes"] > 0 and row["peak_abs_bytes"] > row["peak_bytes"]
        assert row["max_abs_err"] <= max(row["tolerance"].values())
        assert not row["interpreted"]


@pytest.mark.integration
def test_wrong_unsupported_unavailable_error_decided_by_parent_or_worker(mixed):
    rows = mixed[0]["rows"]
    statuses = {(r["method"], r["beta"]): r["status"] for r in rows}
    assert len(statuses) == len({(r["method"], r["beta"], r["status"]) for r in rows})
    assert {m: (statuses[m, 0.1], statuses[m, 0.0]) for m, _ in statuses} == {
        "eager": ("ok", "ok"), "fake-interpreted": ("ok", "ok"),
        "fake-missing-package": ("unavailable", "unavailable"),
        "fake-raises": ("error", "error"),
        # The worker died at β 0.1: a new one measured the case after it.
        "fake-crash": ("error", "ok"),
        # What only the worker can find out (a broken import, a library refusing an
        # argument) gets the same statuses as what the parent decides up front.
        "fake-broken-import": ("unsupported", "unavailable"),  # no smoothing: decided
        "fake-refuses": ("unsupported", "ok"),
    }  # fmt: skip
    assert {r["kind"] for r in rows} == {"loss"}  # decided, gated and failed rows alike
    unsupported = _row(rows, "fake-broken-import", 0.1)
    assert "no label smoothing" in unsupported["reason"] and unsupported["median_ms"] is None
    # Rows keep the case order, a case decided up front (β 0.1) or measured (β 0).
    order = [(r["beta"], r["status"]) for r in rows if r["method"] == "fake-broken-import"]
    assert order == [(0.1, "unsupported")] * 3 + [(0.0, "unavailable")] * 3
    missing = _row(rows, "fake-missing-package")
    assert missing["reason"] == "perfsuite_no_such_package not installed"
    assert "deliberate failure" in _row(rows, "fake-raises")["reason"]
    assert "SIGSEGV" in _row(rows, "fake-crash", 0.1)["reason"]
    assert "failed to import" in _row(rows, "fake-broken-import")["reason"]


@pytest.mark.integration
def test_checkpoint_gets_each_finished_case_as_a_partial_document(mixed):
    final, seen, _ = mixed
    sizes = [len(d["rows"]) for d in seen]
    assert sizes == list(range(3, len(final["rows"]) + 1, 3))  # a case's three phases each
    assert all(d["env"]["partial"] for d in seen)
    assert "partial" not in final["env"]


@pytest.mark.integration
def test_interpreted_rows_take_one_sample_beside_natives_that_keep_theirs(mixed):
    """Issue 30: interpreted rows are gated and metered per phase as before, with no
    timing pass (their one sample is the memory pass's call), and say so."""
    final, _, events = mixed
    rows = [r for r in final["rows"] if r["method"] in ("eager", "fake-interpreted")]
    assert {r["status"] for r in rows} == {"ok"}
    for row in rows:
        assert row["peak_bytes"] > 0 and row["max_abs_err"] is not None
        interpreted = row["method"] == "fake-interpreted"
        assert row["interpreted"] is interpreted
        assert len(row["samples_ms"]) == (INTERPRETED_SAMPLES if interpreted else 3)
        if interpreted:  # the protocol is said where the row is read
            assert "one sample per phase" in row["reason"] and "memory pass" in row["reason"]
    # The interpreted worker started beside eager's, not after it.
    assert events.index("fake-interpreted: worker starting (2 cell(s) to measure)") < (
        events.index("eager done")
    ), events


def _in_process(name: str, phases: list[str]) -> list:
    """``name``'s rows of one TINY case at β 0.1 by the worker's own run_case, in this
    process (process isolation: the ``mixed`` run's subject)."""
    from perfsuite.plan.registry import get_method
    from perfsuite.run.worker import WorkerSpec, run_case

    raw = dict(
        shape="tiny", tokens=TINY.tokens, vocab=TINY.vocab, hidden=TINY.hidden, dtype="fp32",
        beta=0.1, softcap=None, device="cpu",
    )  # fmt: skip
    rows: list = []
    spec = WorkerSpec(name, [raw], out="", phases=phases, samples=1, warmup=0)
    run_case(spec, get_method(name), 0, raw, rows.append)
    return rows


def test_training_terms_are_gated_against_their_own_reference(fake_plugins):
    """ours-zloss / ours-weighted pass against the reference with the same terms; a
    variant that claims the terms but drops them fails the gate (issue 22)."""
    names = ("ours-zloss", "ours-weighted", "fake-zloss-ignored", "fake-weights-ignored")
    rows = {name: _in_process(name, ["fwd+bwd"])[0] for name in names}
    for name in ("ours-zloss", "ours-weighted"):
        assert rows[name].status == "ok", (name, rows[name].reason)
        assert rows[name].loss_err <= rows[name].tolerance["loss"]
    for name in ("fake-zloss-ignored", "fake-weights-ignored"):
        assert rows[name].status == "wrong" and "loss error" in rows[name].reason, name
        # Timed all the same (never counted ok): how fast an inexact method is, is news too.
        assert rows[name].median_ms > 0, name
        # torch's weighted / z-loss value is far outside the gate, not at its edge.
        assert rows[name].loss_err > 10 * rows[name].tolerance["loss"] > 0, rows[name]


@pytest.mark.integration
def test_out_of_memory_is_reported_as_oom():
    from perfsuite.plan.memory_model import gate_bytes

    big = Shape("big", 2048, 8192, 32, dtype="fp32")  # 64 MiB of logits per copy
    # Above what the plan refuses up front (the gate's tensors), under eager's real need.
    limit = gate_bytes(big.tokens, big.vocab, big.hidden, big.dtype) + (1 << 20)
    rows = _run("eager", shape=big, memory_limit=limit)
    assert {r["status"] for r in rows} == {"oom"}
    assert "allocate" in rows[0]["reason"]


def test_phase_subset():
    """bwd alone still sets itself up (a forward, untimed); --phases reaching the
    workers: the CLI tests' fwd+bwd alone (tests/run/test_timers_cli.py, test_ranks.py)."""
    assert [(r.phase, r.status) for r in _in_process("eager", ["bwd"])] == [("bwd", "ok")]


def test_decided_cases_start_no_worker(fake_plugins, monkeypatch):
    def no_worker(*args, **kwargs):
        raise AssertionError("a worker was started for a case the parent could decide")

    fake = types.SimpleNamespace(Popen=no_worker, TimeoutExpired=subprocess.TimeoutExpired)
    monkeypatch.setattr(lifecycle, "subprocess", fake)  # provenance may still run git
    rows = _run("fake-missing-package,fake-no-smoothing", betas="0.1", phases="fwd,fwd+bwd")
    assert [(r["method"], r["phase"], r["status"]) for r in rows] == [
        ("fake-missing-package", "fwd", "unavailable"),
        ("fake-missing-package", "fwd+bwd", "unavailable"),
        ("fake-no-smoothing", "fwd", "unsupported"),
        ("fake-no-smoothing", "fwd+bwd", "unsupported"),
    ]


def _spans(plan, monkeypatch) -> dict[str, tuple[float, float]]:
    spans: dict[str, tuple[float, float]] = {}
    lock = threading.Lock()

    def work(kind, method: str, *args) -> list:
        start = time.monotonic()
        time.sleep(0.3)
        with lock:
            spans[method] = (start, time.monotonic())
        return []

    monkeypatch.setattr(harness, "run_cases", work)  # the order run_kind gives the workers
    monkeypatch.setattr(LossKind, "decided", lambda *args: None)
    harness.run_kind(LossKind(plan), {m: plan.cases() for m in plan.methods})
    return spans


INTERPRETED = ("ours-tiles", "liger", "ours-tiles-list")


def _two_at_a_time_costliest_first(spans: dict[str, tuple[float, float]]) -> None:
    first_two = sorted(INTERPRETED, key=lambda m: spans[m][0])[:2]
    assert "liger" in first_two
    a, b = (spans[m] for m in first_two)
    assert a[0] < b[1] and b[0] < a[1]  # overlapped
    c = spans[next(m for m in INTERPRETED if m not in first_two)]
    assert c[0] >= min(a[1], b[1])  # never three at a time


def test_schedule_runs_interpreted_beside_native(monkeypatch):
    """Issue 30: interpreted workers no longer wait for every native one (their clocks
    stop them instead: tests/run/test_pause.py)."""
    plan = build_plan(
        shapes=[TINY], methods="eager,torch-native,ours-tiles,liger,ours-tiles-list",
        device="cpu", jobs=2,
    )  # fmt: skip
    spans = _spans(plan, monkeypatch)
    assert set(spans) == {"eager", "torch-native", *INTERPRETED}
    assert spans["eager"][1] <= spans["torch-native"][0]  # natives one at a time
    assert any(spans[m][0] < spans["eager"][1] for m in INTERPRETED)
    _two_at_a_time_costliest_first(spans)


def test_schedule_without_memory_for_both_runs_native_first(monkeypatch):
    monkeypatch.setattr(runner, "device_capacity", lambda device: 1 << 20)
    plan = build_plan(
        shapes=[TINY], methods="eager,ours-tiles,liger,ours-tiles-list", device="cpu", jobs=2
    )
    spans = _spans(plan, monkeypatch)
    assert all(spans["eager"][1] <= spans[m][0] for m in INTERPRETED)
    _two_at_a_time_costliest_first(spans)


def test_schedule_with_one_job_is_sequential(monkeypatch):
    plan = build_plan(shapes=[TINY], methods="ours,liger", device="cpu", jobs=1)
    first, then = sorted(_spans(plan, monkeypatch).values())
    assert first[1] <= then[0]


def test_cpu_workers_started_on_a_busy_machine_sleep_while_they_wait(monkeypatch):
    """Issue 30: libgomp's spinning threads made ours ~140x slower beside another process;
    on a quiet machine passive wake-ups cost it 2.3x. A caller's own choice stands."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert child_env("cpu", 2, False, busy=True)["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "OMP_WAIT_POLICY" not in child_env("cpu", 2, False, busy=False)
    assert "OMP_WAIT_POLICY" not in child_env("cuda", 1, False, busy=True)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert child_env("cpu", 1, False, busy=True)["OMP_WAIT_POLICY"] == "ACTIVE"


def test_the_busy_check_counts_other_processes_only(monkeypatch):
    """Cores used by this run's own workers (interpreted ones run beside native ones)
    do not make the machine busy; half a core used by anything else does."""
    readings = iter([(0.0, 0.0, 0.0), (1.0, 1.5, 1.4), (2.0, 2.5, 1.8), (2.1, 9.0, 1.8)])

    class Fake:
        def __init__(self) -> None:
            self.wall, self.machine, self.ours = next(readings)

    monkeypatch.setattr(environment, "Snapshot", Fake)
    monkeypatch.setattr(environment.time, "sleep", lambda s: None)
    probe = environment._Probe()
    assert probe() is False  # 1.5 core-s used in 1 s, 1.4 of them ours
    assert probe() is True  # 1.0 used, 0.4 ours: others used 0.6 of a core
    assert probe() is True  # 0.1 s later: too short a window, the last verdict


def test_interpreted_workers_share_the_cores_and_native_ones_never_interpret(monkeypatch):
    for var in THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    # A parent under TRITON_INTERPRET=1 (a test process) still times ours natively.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    env = child_env("cpu", 2, triton=True)
    assert env["TRITON_INTERPRET"] == "1" and all(var in env for var in THREAD_VARS)
    native = child_env("cpu", 2, triton=False)  # timed alone: keeps every core
    assert not any(var in native for var in ("TRITON_INTERPRET", *THREAD_VARS))


def test_a_killed_workers_reason_leaves_native_log_lines_out():
    """The oom reason used to end in the torch profiler's "USDT:… profiler_stop" lines."""
    stderr = """Loading the method
USDT:2026-11-23 00:10:42 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start
W1123 00:10:42.123 21571 CUPTIActivityProfiler.cpp:123] some kineto warning
USDT:2026-11-23 00:10:42 1:1 SyncActivityProfilerHandler.cpp:59] profiler_stop"""
    status, reason = Ended(-9, None, stderr).death_reason()
    assert status == "oom" and "OOM killer" in reason
    assert reason.endswith("; Loading the method") and "profiler" not in reason
