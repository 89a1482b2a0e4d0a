"""Multi-rank cells (``run --tp``, a ``tp`` axis in ``sweep``) through the real entry
point, with tests/plugins/fake_tp_methods.py's methods: an exact one, a wrong one, and
ones whose rank 1 raises, is SIGKILLed or never joins its peers' collective (each launch
starts K fresh ranks: the runs are module-scoped, read by several tests)."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from plugins import use_plugins

from perfsuite.cli import main
from perfsuite.results.results import load_results
from perfsuite.run.launch import root_cause
from perfsuite.tp_method import shard_ranges

SMALL = ["--tokens", "48", "--vocab", "301", "--hidden", "16", "--dtype", "fp32"]
# --timeout: a worker that hangs anyway fails its test in minutes, not at CI's limit.
QUICK = ["--phases", "fwd+bwd", "--samples", "2", "--warmup", "0", "--timeout", "120"]


def cli(*argv: str) -> tuple[int, str]:
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
        use_plugins(mp, "plugins.fake_tp_methods")
        mp.setenv("COLUMNS", "80")
        with contextlib.redirect_stderr(printed):
            return main(list(argv)), printed.getvalue()


@pytest.fixture(scope="module")
def exact(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict]:
    out = tmp_path_factory.mktemp("tp") / "tp.json"
    code, printed = cli(
        "run", *SMALL, *QUICK, "--tp", "1,2", "--beta", "0,0.1",
        "--methods", "tp-gather", "--out", str(out),
    )  # fmt: skip
    return code, printed, load_results(out)


@pytest.mark.integration
def test_tp_cells_are_gated_measured_across_ranks_and_printed_in_80_columns(exact):
    code, printed, doc = exact
    assert code == 0, printed
    rows = {(r["tp"], r["beta"]): r for r in doc["rows"]}
    assert set(rows) == {(k, b) for k in (1, 2) for b in (0, 0.1)}
    assert {r["kind"] for r in rows.values()} == {"tp"}  # TP=1 too: the kind that made it
    for row in rows.values():
        assert row["status"] == "ok", row["reason"]
        assert row["median_ms"] > 0 and len(row["samples_ms"]) == 2 and row["peak_bytes"] > 0
        # Forward: one all_gather of the logits; backward: one all_reduce of dE.
        assert row["collectives"] == 2 and row["collective_ms"] is not None
        assert row["deterministic"] is True
        assert row["loss_err"] <= row["tolerance"]["loss"]
    # The gathered logits are N x ceil(V/K) fp32 a rank, dE is N x D fp32.
    assert rows[2, 0]["collective_bytes"] == 48 * 151 * 4 + 48 * 16 * 4
    assert doc["env"]["plan"]["tps"] == [1, 2]
    assert "TP" in printed and "tp-gather" in printed  # its table, 80 columns
    # The results path stays whole on its line, however deep pytest's folder is (issue 46).
    lines = [line for line in printed.splitlines() if not line.startswith("results: ")]
    assert max(len(line) for line in lines) <= 80


@pytest.fixture(scope="module")
def failures(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict]:
    out = tmp_path_factory.mktemp("tp") / "failures.json"
    code, printed = cli(
        "run", *SMALL, *QUICK, "--tp", "2", "--beta", "0", "--collective-timeout", "3",
        "--methods", "tp-raises,tp-killed,tp-hangs,tp-wrong", "--out", str(out),
    )  # fmt: skip
    return code, printed, load_results(out)


@pytest.mark.integration
@pytest.mark.slow  # 7-30 s of ranks, workers or compiles here; `-m slow` runs it
def test_a_failing_rank_ends_its_cell_and_no_other(failures):
    code, printed, doc = failures
    assert code == 0, printed  # a cell was measured: tp-wrong's
    by_method = {r["method"]: r for r in doc["rows"]}
    wrong = by_method["tp-wrong"]  # measured, and its reason names every rank that failed
    assert wrong["status"] == "wrong" and wrong["median_ms"] > 0
    assert "rank 0: loss error" in wrong["reason"] and "rank 1: loss error" in wrong["reason"]
    raised = by_method["tp-raises"]
    assert raised["status"] == "error" and raised["tp"] == 2
    assert raised["reason"] == "rank 1: RuntimeError: deliberate failure on rank 1"
    killed = by_method["tp-killed"]
    assert killed["status"] == "oom" and killed["reason"].startswith("rank 1 killed by SIGKILL")
    hung = by_method["tp-hangs"]
    assert hung["status"] == "error"
    assert hung["reason"].startswith(
        "a collective waited past the 3 s timeout (--collective-timeout): rank 1 never joined it"
    )
    assert not list(Path(tempfile.gettempdir()).glob("torchelastic_*"))  # no launcher folder


@pytest.mark.integration
@pytest.mark.slow  # 7-30 s of ranks, workers or compiles here; `-m slow` runs it
def test_sweep_has_a_tp_axis_and_resumes(tmp_path: Path):
    out = tmp_path / "sweep.json"
    argv = ["sweep", "--tokens", "32", "--vocab", "301", "--hidden", "16", "--dtype", "fp32"]
    argv += [*QUICK, "--tp", "1,2", "--beta", "0", "--methods", "tp-gather", "--out", str(out)]
    code, printed = cli(*argv)
    assert code == 0, printed
    doc = load_results(out)
    assert sorted((r["tp"], r["status"]) for r in doc["rows"]) == [(1, "ok"), (2, "ok")]
    assert doc["env"]["sweep"]["grid"]["tp"] == [1, 2]
    code, printed = cli(*argv, "--resume")
    said = " ".join(printed.split())  # unwrapped
    assert code == 0 and "2 already in" in said and "0 to go" in said


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--tp", "0"], "--tp: 0 is outside [1, 64]"),
        (["--tp", "two"], "--tp: 'two' is not an integer"),
        (["--tp", "2", "--methods", "liger-fp32acc"], "unknown TP method(s) liger-fp32acc"),
        (["--tp", "4", "--vocab", "9", "--methods", "tp-gather"], None),
    ],
)
def test_bad_tp_input_is_one_line(argv: list[str], says: str | None, tmp_path: Path):
    out = tmp_path / "r.json"
    code, printed = cli("run", "--tokens", "8", "--hidden", "8", *argv, "--out", str(out))
    if says is None:  # V=9 over 4 ranks leaves rank 3 nothing: an unsupported cell
        doc = load_results(out)
        assert {r["status"] for r in doc["rows"]} == {"unsupported"}
        assert "leaves rank 3 no vocabulary rows" in doc["rows"][0]["reason"]
        return
    assert code == 2 and says in printed and "Traceback" not in printed
    assert not out.exists()


def test_shards_are_megatrons_with_an_uneven_last():
    assert shard_ranges(301, 4) == [(0, 76), (76, 152), (152, 228), (228, 301)]
    assert shard_ranges(8, 2) == [(0, 4), (4, 8)]
    with pytest.raises(ValueError, match="leaves rank 3 no vocabulary rows"):
        shard_ranges(9, 4)


def _failure(exitcode: int, timestamp: float) -> SimpleNamespace:
    return SimpleNamespace(exitcode=exitcode, timestamp=timestamp)


def test_root_cause_prefers_the_rank_that_failed_over_its_peers(tmp_path: Path):
    out = str(tmp_path / "rows.jsonl")
    # Rank 1 was SIGKILLed; gloo aborted rank 0, whose peer vanished; rank 2 raised
    # "connection closed" (a consequence), rank 3 was stopped by the launcher.
    failures = {0: _failure(-6, 1.0), 1: _failure(-9, 1.0), 2: _failure(1, 0.5)}
    failures[3] = _failure(-15, 0.1)
    closed = {"status": "error", "reason": "RuntimeError: Connection closed by peer", "time": 0}
    Path(f"{out}.rank2.json").write_text(json.dumps(closed))
    assert root_cause(failures, out, 4, 60) == (
        "oom", "rank 1 killed by SIGKILL (likely the kernel's OOM killer)"
    )  # fmt: skip
    # A rank's own error wins over any signal its peers died of.
    own = {"status": "oom", "reason": "OutOfMemoryError: CUDA out of memory", "time": 2}
    Path(f"{out}.rank3.json").write_text(json.dumps(own))
    assert root_cause(failures, out, 4, 60) == ("oom", f"rank 3: {own['reason']}")
