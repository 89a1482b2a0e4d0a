"""Change points, the regression rule, `check` and `ack`, the detector's rates, and
check without ruptures."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from history.histories import blocks, count, history, write_history
from perfsuite.cli import main
from perfsuite.history import changepoints, rules, sensitivity


def series(values: list[float], metric: str = "time", kind: str = "cuda", noise: float = 0.003):
    """A series of run values; each run gets 20 samples around its value."""
    rng = np.random.default_rng(0)
    points = []
    for i, v in enumerate(values):
        samples = tuple(v * (1 + rng.normal(0, noise, 20))) if metric == "time" else ()
        points.append(rules.Point(f"{i:012d}", f"t{i:02d}", f"sha{i}", "env", v, 0.0, samples))
    return rules.Series("cell", "label", metric, kind, points)


def quiet(n: int, seed: int = 1, noise: float = 0.003) -> np.ndarray:
    return 10 * (1 + np.random.default_rng(seed).normal(0, noise, n))


def test_step_found_where_injected() -> None:
    values = quiet(16) * np.r_[np.ones(10), np.full(6, 1.10)]
    assert changepoints.detect(values) == [10]
    assert changepoints.detect(quiet(16)) == []


def test_rule_size_persistence_direction() -> None:
    base = quiet(14)
    (up,) = rules.judge(series(list(base * np.r_[np.ones(10), np.full(4, 1.10)])))
    assert up.regression and up.start == 10 and up.size == pytest.approx(0.10, abs=0.01)
    (down,) = rules.judge(series(list(base * np.r_[np.ones(10), np.full(4, 0.90)])))
    assert not down.regression and "faster" in down.why_not
    # Under the 2 % CUDA minimum; under the 20 % CPU minimum.
    small = rules.judge(series(list(base * np.r_[np.ones(10), np.full(4, 1.015)])))
    assert not any(c.regression for c in small)
    (cpu,) = rules.judge(series(list(base * np.r_[np.ones(10), np.full(4, 1.10)]), kind="cpu"))
    assert not cpu.regression and any("minimum" in w for w in cpu.why_not)
    # One run after the change is not a regression yet (never even a change point).
    assert not any(
        c.regression for c in rules.judge(series(list(base[:11] * np.r_[np.ones(10), 1.1])))
    )
    # Within the cell's noise: a 3 % step on a series with 3 % run-to-run scatter.
    noisy = quiet(14, noise=0.03) * np.r_[np.ones(10), np.full(4, 1.03)]
    assert not any(c.regression for c in rules.judge(series(list(noisy), noise=0.03)))


def test_recovered_and_memory() -> None:
    values = quiet(15) * np.r_[np.ones(6), np.full(4, 1.2), np.ones(5)]
    (up, _down) = rules.judge(series(list(values)))
    assert up.regression and up.recovered
    mem = [2.0**30] * 6 + [2.0**30 * 1.05] * 3
    (change,) = rules.judge(series(mem, metric="memory"))
    assert change.regression and change.start == 6


def test_check_exit_codes_and_ack(
    tmp_path: Path, db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # issue 20: check's lines ran to ~220 columns
    folder = tmp_path / "runs"
    folder.mkdir()
    write_history(folder, [1.0] * 8)
    assert history(["import", "--db", str(db), str(folder)]) == 0
    assert history(["check", "--db", str(db)]) == 0
    write_history(folder, [1.0] * 8 + [1.10] * 3)
    assert history(["import", "--db", str(db), str(folder)]) == 0
    capsys.readouterr()
    assert history(["check", "--db", str(db)]) == 1
    out = capsys.readouterr().out
    (line,) = blocks(out, "REGRESSION")
    assert max(map(len, out.splitlines())) <= 80  # COLUMNS=80: blocks fold to fit
    assert "time" in line and "+10." in line and "07abababab" in line and "08abababab" in line
    ident = line.split()[1]
    assert history(["ack", "--db", str(db), ident, "--reason", "accepted: exactness first"]) == 0
    assert count(db, "acks") == 1
    assert history(["check", "--db", str(db)]) == 0
    assert "acknowledged: accepted" in capsys.readouterr().out
    assert history(["ack", "--db", str(db), "nosuchcell/abc", "--reason", "x"]) == 2
    assert history(["ack", "--db", str(db), "no-slash", "--reason", "x"]) == 2


def test_sensitivity_step_found_and_no_false_alarm() -> None:
    rng = np.random.default_rng(3)
    samples = [list(10 * (1 + rng.normal(0, 0.01, 20))) for _ in range(2)]
    none, step = sensitivity.measure(
        samples, "cuda", trials=10, scenarios=[sensitivity.SCENARIOS[0], sensitivity.SCENARIOS[3]]
    )
    assert none.false_alarms == 0
    assert step.detected == step.trials == 20 and step.false_alarms == 0
    assert "step +10%" in sensitivity.format_table([none, step])


@pytest.fixture(scope="module")
def flat_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-run flat history, for `history sensitivity` (it only reads it)."""
    folder = tmp_path_factory.mktemp("flat")
    db = folder / "db" / "h.sqlite"
    write_history(folder, [1.0] * 4)
    assert history(["import", "--db", str(db), str(folder)]) == 0
    return db


def test_sensitivity_command(flat_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its bad options: tests/test_bad_input.py."""
    capsys.readouterr()
    assert history(["sensitivity", "--db", str(flat_db), "--trials", "3", "--cells", "1"]) == 0
    out = capsys.readouterr().out
    assert "drift +1%/run x10" in out and out.count("cuda ") >= 5


def test_without_ruptures_check_and_dashboard_name_the_missing_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lent GPU's image lacks ruptures: every command starts, and the ones that search
    for change points say what is missing in one line."""
    db, demo = tmp_path / "history.sqlite", tmp_path / "demo"  # 8 runs: long enough to search
    assert history(["demo", "-o", str(demo), "--runs", "8", "--step-at", "4"]) == 0
    assert history(["import", "--db", str(db), str(demo)]) == 0
    monkeypatch.setitem(sys.modules, "ruptures", None)
    capsys.readouterr()
    said = "error: change points need ruptures: pip install ruptures\n"
    for argv in (["history", "check"], ["dashboard", "-o", str(tmp_path / "site")]):
        assert main([*argv, "--db", str(db)]) == 2
        assert capsys.readouterr().err == said, argv
