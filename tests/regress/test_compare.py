"""`perfsuite compare`: verdicts per cell, the statistics behind them, exit codes,
environment checks and clear errors on unusable files."""

from __future__ import annotations

import argparse
import copy
import json
import random
import re
from dataclasses import asdict
from pathlib import Path

import pytest

from perfsuite.cli import main as perfsuite_main
from perfsuite.measure.stats import summarize
from perfsuite.regress.compare import parse_fraction, render_markdown
from perfsuite.regress.verdicts import (
    CellComparison,
    CompareError,
    Settings,
    compare_documents,
    compare_time,
)
from perfsuite.results.results import Row, new_document, write_results

ENV = {
    "created": "2026-01-01T00:00:00Z",
    "git": {"sha": "abc", "dirty": False},
    "python": "3.11.7",
    "versions": {"perfsuite": "0.1.0", "torch": "2.13.0", "triton": "3.7.1", "rich": "15"},
    "device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "cuda": "12.8", "driver": "570"},
}
METHODS = ("eager", "ours")
PHASES = ("fwd", "bwd", "fwd+bwd")


def samples(median: float, seed: int, n: int = 20, noise: float = 0.01) -> list[float]:
    """Timing-like samples: multiplicative noise with an occasional slow outlier."""
    rng = random.Random(seed)
    out = [median * rng.lognormvariate(0, noise) for _ in range(n)]
    out[rng.randrange(n)] *= 1.3
    return out


def make_row(method: str, phase: str, seed: int, n: int = 20, noise: float = 0.01,
             **fields) -> Row:  # fmt: skip
    """A Gemma2-2B cell of ``n`` samples (``fields`` override the row's)."""
    ms = {"eager": 40.0, "ours": 25.0}[method] * (1 + PHASES.index(phase))
    data = dict(method=method, shape="gemma2-2b", tokens=8192, vocab=256000, hidden=2304,
                dtype="bf16", beta=0.1, phase=phase, status="ok", device="cuda", kind="loss",
                samples_ms=samples(ms, seed, n, noise),
                peak_bytes=(1 << 30) if method == "eager" else (200 << 20))  # fmt: skip
    row = Row(**{**data, **fields})
    if row.status == "ok" and row.samples_ms:
        row.median_ms = summarize(row.samples_ms, "median")
    else:
        row.samples_ms, row.peak_bytes = [], None
    return row


def make_doc(seed: int = 0, env: dict | None = None, **per_method) -> dict:
    """Every method and phase; ``per_method[m]``: make_row's arguments for m's rows."""
    rows = [make_row(m, p, seed * 100 + i * 10 + j, **per_method.get(m, {}))
            for i, m in enumerate(METHODS) for j, p in enumerate(PHASES)]  # fmt: skip
    return new_document(copy.deepcopy(env or ENV), rows)


def slower(doc: dict, method: str, factor: float) -> dict:
    """``doc`` with ``method``'s timed cells ``factor`` times slower."""
    doc = copy.deepcopy(doc)
    for row in doc["rows"]:
        if row["method"] == method and row["samples_ms"]:
            row["samples_ms"] = [x * factor for x in row["samples_ms"]]
            row["median_ms"] *= factor
    return doc


def cli(*argv: str) -> int:
    """``perfsuite compare ...`` through the console script's entry point."""
    try:
        return perfsuite_main(["compare", *map(str, argv)])
    except SystemExit as exc:  # argparse usage errors
        return int(exc.code)


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    assert captured.err.startswith("error: ") and "Errno" not in captured.err
    return captured.err


@pytest.fixture
def files(tmp_path):
    def write(name: str, doc: dict):
        return write_results(tmp_path / name, doc)

    return write


# -- verdicts ------------------------------------------------------------------


def said(cell: CellComparison) -> str:
    """A cell's verdict, its time's and its memory's, then its notes: one line."""
    notes = "; ".join(cell.notes)
    return f"{cell.verdict}: time {cell.time.verdict}, memory {cell.memory.verdict}; {notes}"


SAME = "same: time same, memory same; "
ON_CPU = {"device": "cpu", "peak_bytes": 4 << 20}
# ours in the baseline and in the current run (fields of its rows), how much slower it
# is now, compare's settings (its flags), then what its three cells say and whether they
# fail the gate.
# Eager is the same code in both runs: its cells read "same" in every case.
VERDICTS = {
    "unchanged": ({}, {}, 1.0, {}, SAME, False),
    "10% slower": ({}, {}, 1.10, {}, "regression: time regression, memory same", True),
    "20% faster": ({}, {}, 0.8, {}, "improvement: time improvement, memory same", False),
    "1.5% slower under a 5% threshold": ({}, {}, 1.015, {"time_threshold": 0.05},
                                         SAME + "significantly slower, below", False),
    # A 10 % shift of the median on samples spread over ±30 % is not evidence.
    "10% slower in noise": ({"n": 6, "noise": 0.3}, {"n": 6, "noise": 0.3}, 1.10, {},
                            SAME + "slower but not significant", False),
    "interpreted": ({"interpreted": True}, {"interpreted": True}, 2.0, {},
                    "same: time None, memory same; interpreted: time not compared", False),
    "3 samples": ({"n": 3}, {"n": 3}, 2.0, {}, SAME + "too few samples (3 vs 3)", False),
    **{f"20% slower by {m}": ({}, {}, 1.2, {"metric": m}, "regression: time regression", True)
       for m in ("median", "mean", "min", "p20", "p80")},
    "ok without a time": ({}, {"samples_ms": []}, 1.0, {},
                          "regression: time None, memory None; ok but no time was recorded", True),
    "ok to oom": ({}, {"status": "oom", "reason": "CUDA out of memory"}, 1.0, {},
                  "status-changed: time None, memory None; CUDA out of memory", True),
    **{f"{a} to {b}": ({"status": a}, {"status": b}, 1.0, {}, "status-changed", fails)
       for a, b, fails in [("ok", "wrong", True), ("ok", "unsupported", True),
                           ("oom", "ok", False), ("unavailable", "error", True),
                           ("error", "unavailable", False)]},
    "unsupported in both": ({"status": "unsupported"}, {"status": "unsupported"}, 1.0, {},
                            "same: time None, memory None", False),
    "2% more memory": ({}, {"peak_bytes": int(1.02 * (200 << 20))}, 1.0, {},
                       "regression: time same, memory regression", True),
    "0.5% more memory": ({}, {"peak_bytes": int(1.005 * (200 << 20))}, 1.0, {}, SAME, False),
    # +12.5 % of a CPU cell's 4 MiB, but below the RSS meter's resolution slack
    "512 KiB more on a CPU": (ON_CPU, {**ON_CPU, "peak_bytes": (4 << 20) + (512 << 10)}, 1.0,
                              {}, SAME, False),
}  # fmt: skip


@pytest.mark.parametrize(("base", "cur", "factor", "settings", "verdict", "fails"),
                         VERDICTS.values(), ids=VERDICTS)  # fmt: skip
def test_a_change_of_a_cell_gets_its_verdict(base, cur, factor, settings, verdict, fails):
    current = slower(make_doc(seed=1, ours=cur), "ours", factor)
    result = compare_documents(make_doc(ours=base), current, Settings(**settings))
    assert [said(c) for c in result.cells if c.row["method"] == "eager"] == [SAME] * 3
    ours = [c for c in result.cells if c.row["method"] == "ours"]
    assert all(said(c).startswith(verdict) and c.failing == fails for c in ours), ours
    assert bool(result.failures) == fails


def test_the_command_says_ok_or_fail_and_writes_a_step_summary(files, capsys):
    base = files("b.json", make_doc())
    assert cli(base, files("same.json", make_doc(seed=1))) == 0  # a fresh run: new noise
    assert "OK: 6 same" in capsys.readouterr().out
    cur = files("c.json", slower(make_doc(seed=1), "ours", 1.10))
    assert cli(base, cur) == 1
    assert "FAIL: 3 failing cell(s); 3 regression, 3 same" in capsys.readouterr().out
    assert cli(base, cur, "--format", "markdown") == 1
    md = capsys.readouterr().out
    assert md.startswith("### perfsuite compare: ❌ regression")
    assert "| method | shape |" in md and "🔴 regression **(fails)**" in md
    assert "<details><summary>3 unchanged cell(s)</summary>" in md
    faster = render_markdown(compare_documents(make_doc(), slower(make_doc(seed=1), "ours", 0.8)))
    assert "3 improvement(s)" in faster and "perfsuite baseline update" in faster


# -- environments and unusable files ------------------------------------------


def test_another_device_or_library_is_refused_but_another_perfsuite_or_driver_is_not(files, capsys):
    other = copy.deepcopy(ENV)
    other["device"]["name"] = "NVIDIA A100-SXM4-80GB"
    base, cur = files("b.json", make_doc()), files("c.json", make_doc(seed=1, env=other))
    assert cli(base, cur) == 2
    err = capsys.readouterr().err
    assert "different environments" in err and "A100" in err and "--allow-env-mismatch" in err
    assert cli(base, cur, "--allow-env-mismatch") == 0
    assert "environment differs" in capsys.readouterr().out
    newer_torch = copy.deepcopy(ENV)
    newer_torch["versions"]["torch"] = "2.14.0"
    with pytest.raises(CompareError, match="torch version: 2.13.0"):
        compare_documents(make_doc(), make_doc(seed=1, env=newer_torch))
    newer_suite = copy.deepcopy(ENV)
    newer_suite["versions"]["perfsuite"] = "0.2.0"
    newer_suite["device"]["driver"] = "575"
    result = compare_documents(make_doc(), make_doc(seed=1, env=newer_suite))
    assert not result.failures and any("driver" in w for w in result.env_warnings)


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda text: text[: len(text) // 2], "not valid JSON (truncated?)"),
        (lambda text: text[: text.index("null") + 2], "not valid JSON (truncated?)"),
        (lambda text: "{not json", "not valid JSON"),
        (lambda text: "[]", "expected a JSON object"),
        (lambda text: re.sub(r'"schema_version": \d+', '"schema_version": 99', text), "99"),
        (lambda text: json.dumps({"schema_version": 1, "env": {}, "rows": [{}]}), "lacks"),
        (None, "no such results file"),
    ],
)
def test_an_unusable_file_is_explained_without_traceback(files, tmp_path, capsys, mangle, message):
    base = files("b.json", make_doc())
    bad = tmp_path / "bad.json"
    if mangle is not None:
        bad.write_text(mangle(base.read_text()))
    assert cli(base, bad) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and str(bad) in err


def test_new_and_missing_cells(files, capsys):
    """A run that measured less fails the gate; a cell the baseline lacks is new."""
    fewer = make_doc(seed=1)
    fewer["rows"] = [r for r in fewer["rows"] if r["method"] == "ours"]
    fewer["rows"].append(asdict(make_row("ours", "fwd", 5, beta=0.0)))
    assert cli(files("b.json", make_doc()), files("c.json", fewer)) == 1
    out = capsys.readouterr().out
    assert "FAIL: 3 failing cell(s); 3 missing, 1 new, 3 same" in out
    assert "not in the current run" in out


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [  # a softcapped run against an uncapped baseline matched nothing and said "OK"
        ("softcap", 30.0, "softcap - in {b} but 30 in {c}"),
        ("timer", "graph", "events in {b} but graph in {c}: cells timed differently are never"),
    ],
    ids=["softcap", "timer"],
)
def test_runs_with_no_cell_in_common_are_refused_with_the_difference(
    files, capsys, field, value, words
):
    cur = make_doc(seed=1)
    for row in cur["rows"]:
        row[field] = value
    base, cur = files("b.json", make_doc()), files("c.json", cur)
    assert cli(base, cur) == 2
    err = one_error_line(capsys)
    assert "nothing to compare" in err and words.format(b=base, c=cur) in err


def test_the_workload_is_part_of_a_cell():
    """A synthetic-workload run is not the same measurement as a random-input one."""
    synthetic = make_doc(seed=1, eager={"workload": "synthetic"}, ours={"workload": "synthetic"})
    with pytest.raises(CompareError, match="workload random in baseline but synthetic"):
        compare_documents(make_doc(), synthetic)
    both = make_doc()
    both["rows"] += synthetic["rows"]  # one file may hold both: no "appears twice"
    result = compare_documents(both, slower(synthetic, "ours", 1.5))
    assert result.count("missing") == 6 and result.count("regression") == 3
    assert all(c.row["workload"] == "synthetic" for c in result.cells if c.verdict != "missing")
    assert "gemma2-2b synthetic" in render_markdown(result)  # the label says which
    both["rows"].append(both["rows"][0])  # the same cell twice is
    with pytest.raises(CompareError, match="appears twice"):
        compare_documents(both, synthetic)


# -- statistics ----------------------------------------------------------------


def test_parse_fraction(files):
    assert parse_fraction("5%") == pytest.approx(0.05)
    assert parse_fraction("0.05") == pytest.approx(0.05)
    for bad in ("7", "-1%", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_fraction(bad)
    base = files("b.json", make_doc())
    assert cli(base, base, "--time-threshold", "five") == 2  # a usage error


def test_false_alarm_rate_on_synthetic_noise_is_at_most_alpha():
    """Same distribution both sides: flagged in well under 1 % of 400 trials."""
    settings = Settings(time_threshold=0.0)  # the test alone
    flagged = 0
    for seed in range(400):
        d = compare_time(samples(10, seed), samples(10, seed + 10_000), settings)
        flagged += d.verdict == "regression"
    assert flagged <= 6


@pytest.mark.parametrize(
    ("field", "value"),
    [("median_ms", float("nan")), ("median_ms", float("inf")), ("median_ms", "fast"),
     ("peak_bytes", -1), ("samples_ms", [1.0, float("nan")])],
)  # fmt: skip
def test_non_finite_or_negative_measurements_are_corrupt_not_same(files, capsys, field, value):
    """A broken run must not pass the regression gate as "same"."""
    base = files("b.json", make_doc())
    doc = make_doc(seed=1)
    doc["rows"][0][field] = value
    cur = files("c.json", doc)
    assert cli(base, cur) == 2
    err = capsys.readouterr().err
    assert field in err and "not a finite number" in err and "Traceback" not in err


# -- machine states (issue 20: a busy machine made identical code read 21 improvements) --


def machine_env(busy: bool) -> dict:
    """ENV with the machine's state: ours measured busy (eager quiet), or all quiet."""
    groups = [{"group": "ours", "busy": ["other processes used 1.0 of 2 cores"] if busy else []}]
    return {**copy.deepcopy(ENV), "machine": {"groups": [*groups, {"group": "eager", "busy": []}]}}


def test_compare_refuses_to_judge_time_across_machine_states(files, capsys):
    base = files("quiet.json", make_doc(seed=0, env=machine_env(False)))
    # identical code measured busy reads 30 % slower: without the check, regressions
    cur = files("busy.json", slower(make_doc(seed=1, env=machine_env(True)), "ours", 1.3))
    assert cli(base, cur) == 2
    err = one_error_line(capsys)
    assert "machine states differ" in err and "--accept-busy" in err and "busy.json" in err
    assert cli(cur, base) == 2  # a busy baseline is refused too
    capsys.readouterr()
    assert cli(base, cur, "--accept-busy") == 1  # told to: the regression is called
    out = capsys.readouterr().out
    assert "regression" in out and "--accept-busy" in out
    assert cli(base, files("quiet2.json", make_doc(seed=1, env=machine_env(False)))) == 0
    capsys.readouterr()
    # Issue 30: `compare r1.json r1.json` of a busy run said "machine states differ".
    assert cli(cur, cur) == 2
    err = one_error_line(capsys)
    assert err.startswith("error: both runs were measured on a busy machine") and "busy.json" in err
    assert "machine states differ" not in err and "--accept-busy to judge time anyway" in err
    assert cli(cur, cur, "--accept-busy") == 0


def test_a_missing_baseline_is_named_not_taken_for_a_store(files, tmp_path, monkeypatch, capsys):
    """Issue 30: `compare r1 r2.json` with no r1 said no baseline was stored for the
    device (expected r1/<device>/) instead of that r1 does not exist."""
    monkeypatch.chdir(tmp_path)
    cur = files("r2.json", make_doc(seed=0))
    assert cli("r1", cur) == 2
    err = one_error_line(capsys)
    assert err.startswith("error: r1 does not exist") and "no baseline is stored" not in err


def test_a_run_without_rows_fails_to_compare_not_passes(files, capsys):
    base = files("b.json", make_doc())
    empty = make_doc(seed=1)
    empty["rows"] = []
    cur = files("c.json", empty)
    said = f"{cur}: holds no rows (no cell was written to it)"  # every reader's rule
    # Issue 36: a gate that passed on nothing. No "✅ no regression" either, nor an
    # empty baseline.
    for argv in ([base, cur], [base, cur, "--format", "markdown"], [cur, base]):
        assert cli(*argv) == 2
        assert said in one_error_line(capsys)


def test_a_missing_cell_of_a_method_unavailable_with_a_reason_passes(files, capsys):
    """The run says why it has no eager cells: accounted for, not a failure."""
    base = files("b.json", make_doc())
    cur = make_doc(seed=1)
    for row in cur["rows"]:
        if row["method"] == "eager":  # recorded at another β: the baseline's cells are absent
            row.update(status="unavailable", reason="eager: not installed", beta=0.0)
            row.update(samples_ms=[], median_ms=None, peak_bytes=None)
    assert cli(base, files("c.json", cur)) == 0
    out = capsys.readouterr().out
    assert "OK: 3 missing, 3 new, 3 same" in out
    assert "eager: not installed" in out
    for row in cur["rows"]:
        row["reason"] = ""  # no reason stated: no excuse
    assert cli(base, files("c2.json", cur)) == 1


def test_files_of_different_kinds_are_refused_in_one_line(files, capsys):
    base = files("b.json", make_doc())
    step = make_doc(seed=1)
    for row in step["rows"]:
        row.update(kind="step", workload="step(tiny)", phase="step")
    step["rows"] = step["rows"][:1]
    cur = files("c.json", step)
    assert cli(base, cur) == 2
    err = one_error_line(capsys)
    assert f"{base} holds loss rows, {cur} holds step rows" in err and "different kinds" in err


def test_console_tables_keep_number_pairs_whole_and_one_layout(tmp_path, capsys, monkeypatch):
    """At 80 columns "3.725 → 5.643" was split over lines, and the second table was laid
    out unlike the first. The files lie 150 characters deeper than pytest put them: the
    title "b → c" folded after "→" where pytest's own folder was long (issue 46)."""
    monkeypatch.setenv("COLUMNS", "80")
    deep = tmp_path.joinpath(*(c * 49 for c in "xyz"))  # 150 characters with the slashes

    def files(name: str, doc: dict) -> Path:
        return write_results(deep / name, doc)

    base, cur = make_doc(), slower(make_doc(seed=1), "ours", 1.5)
    second_base, second_cur = make_doc(seed=3), slower(make_doc(seed=4), "eager", 1.5)
    for row in second_base["rows"] + second_cur["rows"]:
        row["beta"] = 0.0
    base["rows"] += second_base["rows"]
    cur["rows"] += second_cur["rows"]
    cur["rows"][0].update(status="oom", reason="out of memory", samples_ms=[], median_ms=None)
    assert cli(files("b.json", base), files("c.json", cur)) == 1
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 80
    assert not [line for line in lines if line.rstrip().endswith("→")]
    pairs = [line for line in lines if re.search(r"\d → \d", line)]
    assert len(pairs) == 11  # every measured cell's times, each on its one line
    headers = [i for i, line in enumerate(lines) if line.lstrip().startswith("method")]
    assert len(headers) == 2
    first, second = (lines[i - 1 : i + 1] for i in headers)
    assert first == second  # one layout: the same columns, folded the same way
    # The title: "b → c" on its one line, the paths' names; then each path in full,
    # folded at its slashes.
    assert lines[0] == "b.json → c.json"
    assert lines[1].startswith("baseline: ") and "".join(lines[1:]).count(str(deep)) == 2
    # Names that cannot share a line are elided in their middle; the paths follow whole.
    long = [files(f"{n}-{c * 50}.json", make_doc()) for n, c in (("base", "x"), ("current", "y"))]
    assert cli(*long) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines[0]) <= 80 and re.fullmatch(r"base-x*…x*\.json → current-y*…y*\.json", lines[0])
    assert all("".join(lines[1:]).count(str(path)) == 1 for path in long)
