"""``.ci/gpu-run``: call 1 fits 7 minutes of device time with the steps that matter most,
each call fits its limit, and the runner, rehearsed on CPU, refuses a step it cannot
finish, skips one whose option this tree lacks (saying why), cuts a step at the call's
limit, and leaves in ``$OUT`` the files of every step that finished (packed as they come)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".ci"))
gpu_plan = importlib.import_module("gpu_plan")
gpu_run = importlib.import_module("gpu_run")


def manifest(out: Path, tag: str) -> dict:
    return json.loads((out / f"manifest-{tag}.json").read_text())


def packed(out: Path, tag: str) -> set[str]:
    with tarfile.open(out / f"gpu-run-{tag}.tgz") as tar:
        return {Path(*Path(n).parts[1:]).as_posix() for n in tar.getnames()}


def _plan(device: str = "cuda") -> dict:
    return {s.id: s for s in gpu_plan.build_steps(device, "python3", ROOT)}


def test_call_1_fits_seven_device_minutes_in_the_order_that_matters() -> None:
    steps = _plan()
    call = [steps[i] for i in gpu_plan.CALLS["1"]]
    assert [s.id for s in call] == ["0a", "k", "g", "pk", "pg", "r", "h"]
    assert gpu_run.call_estimate(call) <= gpu_plan.CALL_LIMITS_S["1"]
    assert gpu_plan.CALL_LIMITS_S["1"] + gpu_plan.TRANSFERS_S <= 420  # 7 minutes
    tests = steps["k"].command(ROOT)
    assert tests[1:3] == ["-m", "pytest"] and tests[-1] == "tests/kernels/test_cuda_checks.py"
    assert tests[tests.index("-m", 3) + 1] == "cuda"
    cell = steps["g"].command(ROOT)
    for flag, value in (("--shape", "gemma2-2b"), ("--beta", "0,0.1"), ("--phases", "fwd+bwd")):
        assert cell[cell.index(flag) + 1] == value
    assert "--softcap" in cell  # Gemma2's 30: the kernel's targets are stated there
    methods = cell[cell.index("--methods") + 1].split(",")
    assert methods == ["ours", gpu_plan.OTHER_ROUTE, "ours-cublas", "torch-compile"]
    peers = steps["h"].command(ROOT)
    assert peers[peers.index("--methods") + 1].split(",") == ["ours-fused", "liger", "cce", "eager"]
    assert peers[: peers.index("--methods")] == cell[: cell.index("--methods")]


def test_call_1_profiles_every_candidate_per_kernel_and_both_routes_as_a_graph() -> None:
    """Issue 44 item 5, issue 45 item 3: a trace and a kernel breakdown per candidate, so one
    call picks the faster route; the graph timer for both routes (ours must capture)."""
    steps = _plan()
    cell = steps["g"].command(ROOT)
    candidates = cell[cell.index("--methods") + 1]
    for sid, timer, methods in (("pk", "kernels", candidates),
                                ("pg", "graph", f"ours,{gpu_plan.OTHER_ROUTE}")):  # fmt: skip
        argv = steps[sid].command(ROOT)
        assert argv[argv.index("--timer") + 1] == timer, sid
        assert argv[argv.index("--methods") + 1] == methods, sid
        assert argv[argv.index("--beta") + 1] == "0.1", sid
        assert argv[argv.index("--profile") + 1] == f"{ROOT}/profile-{timer}", sid
        assert argv[argv.index("--out") + 1] == f"{ROOT}/gemma2-2b-{timer}.json", sid
        assert argv[: argv.index("--beta")] == cell[: cell.index("--beta")], sid


def test_the_other_route_is_the_one_the_rule_does_not_pick() -> None:
    """The candidates follow kernels/routes.py: flipping sm_90's entry swaps the method."""
    from perfsuite.kernels import routes

    chosen = routes.route_for("sm_90", "bf16")
    assert gpu_plan.OTHER_ROUTE == routes.method_for(routes.other_route(chosen))
    from perfsuite.plan.registry import all_methods

    assert gpu_plan.OTHER_ROUTE in all_methods()
    assert set(gpu_plan.CELL_METHODS.split(",")) <= set(all_methods())


def test_tp_step_runs_at_a_beta_every_peer_supports() -> None:
    """Issue 45 item 1: at β 0.1 megatron and torch-parallel were unsupported (H200 call 2),
    so --tp 1 measured nothing beside ours."""
    from perfsuite.method import Case
    from perfsuite.plan.registry import methods_for

    argv = _plan()["9a"].command(ROOT)
    betas = [float(b) for b in argv[argv.index("--beta") + 1].split(",")]
    tp = methods_for("tp")
    for name in argv[argv.index("--methods") + 1].split(","):
        for beta in betas:
            case = Case(8192, 256000, 2304, "bf16", beta, 30.0, device="cuda")
            assert tp[name].unsupported_reason(case) is None, (name, beta)


def test_every_call_fits_its_limit_and_every_estimate_says_where_from() -> None:
    steps = _plan()
    for call in ("1", "2", "3", "4"):
        ids = [i for i in gpu_plan.CALLS[call] if i != "3b"]  # 3b: only with a dump, last
        limit = gpu_plan.CALL_LIMITS_S.get(call, gpu_plan.DEFAULT_LIMIT_S)
        assert gpu_run.call_estimate([steps[i] for i in ids]) <= limit, call
        assert limit <= 570  # 9.5 min: the tool stops a command at 10
    # The rest of today's checklist, in call 2: the TMA configs, ours at the power cap,
    # step, run --tp 1, sensitivity, the sweep.
    assert gpu_plan.CALLS["2"][1:] == ["t", "s", "9b", "9a", "6", "8b"]
    placed = {steps[i].item for c in "1234" for i in gpu_plan.CALLS[c]}
    assert {str(n) for n in range(8)} <= placed  # setup and issue 18's items 1-7
    for sid in ("1a", "1b", "1c", "3a", "8a", "9a"):
        assert "--softcap" in steps[sid].command(ROOT), sid
    for s in steps.values():
        assert s.source and s.limit_s >= s.estimate_s > 0
    assert set(_plan("cpu")) == set(steps)  # the rehearsal has every step


def test_dry_run_prints_each_estimate_and_the_calls_total(capsys) -> None:
    assert gpu_run.main(["1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines)
    for sid in gpu_plan.CALLS["1"]:
        (line,) = [x for x in lines if x.split()[:1] == [sid]]
        estimate = _plan()[sid].estimate_s
        assert f"est {estimate:4.0f} s" in line
    total = gpu_run.call_estimate([_plan()[i] for i in gpu_plan.CALLS["1"]])
    assert lines[-1] == f"call 1: 7 steps, estimate {total:.0f} s, limit 400 s: fits"
    assert gpu_run.main(["2", "--dry-run", "--limit", "200"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("limit 200 s: DOES NOT FIT")


def test_sensitivity_trials_bound_false_alarms_below_two_percent() -> None:
    from perfsuite.regress.sensitivity import rate_bounds

    p, r = gpu_plan.SENS_PROCESSES, gpu_plan.SENS_ROUNDS
    trials = p * (p - 1) * r
    assert rate_bounds(1, trials)[1] < 0.02  # even with one false alarm
    assert rate_bounds(0, 36)[1] > 0.09  # the first light's 36: < 9.6 % only


def _step(sid: str, argv: list[str], estimate: float = 0.1, limit: float = 60) -> object:
    return gpu_plan.Step(sid, "9", f"t{sid}", "test", estimate, limit, "test", argv)


def test_refuses_what_does_not_fit_and_cuts_at_the_call_limit(tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    steps = [
        _step("a", ["bash", "-c", "echo done > {W}/a.txt"]),
        _step("b", ["bash", "-c", "touch {W}/b-started"], estimate=500),
        _step("c", ["bash", "-c", "echo partial > {W}/c.txt; exec sleep 60"]),
        _step("d", ["bash", "-c", "touch {W}/d-started"]),
    ]
    call = gpu_run.Call(
        "t", work, out, limit_s=gpu_run.RESERVE_S + gpu_run.GRACE_S + 4, t0=time.time()
    )
    call.meta = {"call": "t"}
    t = time.time()
    gpu_run.run_call(call, steps, dict(os.environ))
    assert time.time() - t < 15
    status = {s["id"]: s for s in manifest(out, "t")["steps"]}
    assert status["a"]["status"] == "done" and status["a"]["rc"] == 0
    assert "a.txt" in status["a"]["files"]
    assert status["b"]["status"] == "refused" and "estimate 500 s" in status["b"]["reason"]
    assert not (work / "b-started").exists() and status["b"]["started_s"] is None
    assert status["c"]["status"] == "timed out" and status["c"]["seconds"] < 10
    assert status["d"]["status"] == "refused"  # nothing left after c
    files = packed(out, "t")
    assert {"a.txt", "c.txt", "manifest-t.json", "gpu-run-t.log"} <= files
    assert manifest(out, "t")["finished"] is True


def test_packs_while_a_step_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call killed mid-step (the tool's own limit) still returns what was written."""
    monkeypatch.setattr(gpu_run, "PACK_EVERY_S", 0.5)
    out = tmp_path / "out"
    step = _step("a", ["bash", "-c", "echo first > {W}/first.txt; sleep 6"])
    call = gpu_run.Call("k", tmp_path / "work", out, limit_s=60, t0=time.time())
    worker = threading.Thread(target=gpu_run.run_call, args=(call, [step], dict(os.environ)))
    worker.start()
    try:
        deadline = time.time() + 5.5
        seen: set[str] = set()
        while time.time() < deadline and "first.txt" not in seen:
            time.sleep(0.3)
            if (out / "gpu-run-k.tgz").exists():
                try:
                    seen = packed(out, "k")
                except (tarfile.TarError, OSError, EOFError):
                    continue
        assert "first.txt" in seen
        assert manifest(out, "k")["steps"][0]["status"] == "running"
    finally:
        worker.join()


def test_a_file_too_large_to_come_back_is_named_not_packed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool returns no file over 16 MiB: one large trace must not lose every result."""
    monkeypatch.setattr(gpu_run, "PACK_FILE_MAX", 1000)
    out = tmp_path / "out"
    step = _step("a", ["bash", "-c", "head -c 2000 /dev/zero > {W}/big.bin; echo ok > {W}/ok"])
    call = gpu_run.Call("b", tmp_path / "work", out, limit_s=60, t0=time.time())
    gpu_run.run_call(call, [step], dict(os.environ))
    files = packed(out, "b")
    assert "ok" in files and "big.bin" not in files
    assert manifest(out, "b")["left_out_of_pack"] == ["big.bin (0.0 MiB)"]


def test_the_call_logs_clocks_beside_its_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nvidia-smi's clocks, power and throttle reasons for the whole call, packed with the
    steps' files and stopped with it; a machine without nvidia-smi says so."""
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/bash\ntrap 'echo stopped; exit 0' INT\necho \"$*\"\n"
        "while :; do echo '2026/11/28 19:40:00.000, 1530 MHz, 700.00 W'; sleep 0.1; done\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    out = tmp_path / "out"
    call = gpu_run.Call("c", tmp_path / "work", out, limit_s=60, t0=time.time())
    gpu_run.run_call(call, [_step("a", ["sleep", "0.5"])], dict(os.environ))
    assert manifest(out, "c")["clocks"] == "clocks.csv" and "clocks.csv" in packed(out, "c")
    lines = (tmp_path / "work" / "clocks.csv").read_text().splitlines()
    assert "clocks_throttle_reasons.active" in lines[0] and "-lms 200" in lines[0]
    assert "1530 MHz" in lines[1] and lines[-1] == "stopped"  # ended by Ctrl-C, not killed
    monkeypatch.setattr(gpu_run.shutil, "which", lambda name: None)
    call = gpu_run.Call("n", tmp_path / "none", out, limit_s=60, t0=time.time())
    gpu_run.run_call(call, [_step("a", ["true"])], dict(os.environ))
    assert manifest(out, "n")["clocks"] == "not logged: no nvidia-smi"


def _wrapper(out: Path, work: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "GPU_RUN_NO_WHEELS": "1"}
    env.pop("GPU_RUN_T0", None)
    return subprocess.run(
        [str(ROOT / ".ci" / "gpu-run"), "--device", "cpu", "--work", str(work), *args],
        env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )  # fmt: skip


def test_rehearsal_on_cpu(tmp_path: Path) -> None:
    """The wrapper and real steps: 2a measures, 6 is refused, 1a is stopped at its limit."""
    out, work = tmp_path / "out", tmp_path / "work"
    proc = _wrapper(out, work, "--items", "2a,6,1a", "--limit", "150", "--estimate", "6=999",
                    "--step-limit", "1a=1", timeout=170)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = manifest(out, "items")
    status = {s["id"]: s for s in m["steps"]}
    assert [s["id"] for s in m["steps"]] == ["2a", "6", "1a"]
    assert status["2a"]["status"] == "done" and status["2a"]["rc"] == 0
    rows = [json.loads(line) for line in (work / "ours-determinism.jsonl").read_text().splitlines()]
    same = [r for r in rows if r["check"] == "determinism"]
    assert same and all(r["dE"]["identical"] and r["dC"]["identical"] for r in same)
    assert any(r["check"] == "across-budgets" for r in rows)
    assert status["6"]["status"] == "refused" and status["6"]["started_s"] is None
    assert not (work / "6-sensitivity.log").exists()
    assert status["1a"]["status"] == "timed out"
    assert {"ours-determinism.jsonl", "2a-ours-determinism.log"} <= packed(out, "items")
    assert (out / "gpu-run-items.log").read_text().count(": refused: estimate 999 s") == 1


def test_a_step_that_needs_an_earlier_steps_file(tmp_path: Path) -> None:
    """The filtering study (8e) runs on the dump 8c trains and writes, and skips without it."""
    out, work = tmp_path / "out", tmp_path / "work"
    proc = _wrapper(out, work, "--items", "8e,8c,8e", "--limit", "200", timeout=220)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = manifest(out, "items")["steps"]
    assert [(s["id"], s["status"]) for s in steps] == [("8e", "skipped"), ("8c", "done")]
    assert "trained-small.safetensors" in steps[0]["reason"]
    proc = _wrapper(out, work, "--items", "8e", "--limit", "200", timeout=220)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert manifest(out, "items")["steps"][0]["status"] == "done"
    study = json.loads((work / "filtering-trained-small.json").read_text())
    assert len(study["rows"]) == 1 + 3  # no filter, then 3 filters at one threshold and order


def test_a_step_whose_option_this_tree_lacks_is_skipped_saying_why(tmp_path: Path) -> None:
    """Call 1's last steps need options other changes add: asked of `--help` at run time."""
    py = sys.executable
    assert gpu_plan.missing_options(py, ROOT, ["run"], ("--phases", "--softcap")) == ""
    why = gpu_plan.missing_options(py, ROOT, ["run"], ("--phases", "--no-such-option"))
    assert why == "`perfsuite run --help` offers no --no-such-option: not in this tree yet"
    argv = gpu_plan._if_offered(py, ROOT, ["run"], ("--no-such-option",), ["true"])
    step = gpu_plan.Step("x", "x", "needs-option", "test", 1, 60, "test", argv)
    out = tmp_path / "out"
    call = gpu_run.Call("o", tmp_path / "work", out, limit_s=120, t0=time.time())
    gpu_run.run_call(call, [step], dict(os.environ))
    (record,) = manifest(out, "o")["steps"]
    assert record["status"] == "skipped" and record["reason"] == why
    assert f"x needs-option: skipped: {record['reason']}" in (out / "gpu-run-o.log").read_text()


def _done_or_skipped_saying_why(record: dict) -> bool:
    if record["status"] == "skipped":
        return "offers no" in record["reason"]
    return record["status"] == "done" and record["rc"] == 0


def test_call_1_rehearsed_on_cpu(tmp_path: Path) -> None:
    """Every step of call 1 on CPU: the CUDA tests collected and skipped, saying why; the
    cell measured with its determinism record; the profile and kernel-report steps run
    where this tree offers their options and say why not where it does not."""
    out, work = tmp_path / "out", tmp_path / "work"
    proc = _wrapper(out, work, "1", "--limit", "900", timeout=950)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = {s["id"]: s for s in manifest(out, "1")["steps"]}
    assert list(status) == gpu_plan.CALLS["1"]
    for sid in ("0a", "k", "g"):
        assert status[sid]["status"] == "done" and status[sid]["rc"] == 0, status[sid]
    for sid in ("pk", "pg", "r"):
        assert _done_or_skipped_saying_why(status[sid]), status[sid]
    assert status["h"]["status"] == "done" and status["h"]["rc"] == 0, status["h"]
    assert "SKIPPED" in (work / "k-cuda-tests.log").read_text()  # -rs: the reason too
    assert "no CUDA device" in (work / "k-cuda-tests.log").read_text()
    rows = json.loads((work / "gemma2-2b-fwdbwd.json").read_text())["rows"]
    assert {r["method"] for r in rows} == set(gpu_plan.CANDIDATES.split(","))
    assert any(r.get("deterministic") is True for r in rows)  # eager torch ops: bit-exact
    files = {"cuda-tests.xml", "gemma2-2b-fwdbwd.json", "gemma2-2b-peers.json", "manifest-1.json"}
    assert files <= packed(out, "1")


@pytest.mark.slow
def test_every_call_rehearsed_on_cpu(tmp_path: Path) -> None:
    """Every step of the four calls on CPU: a dump-less 3b skipped, p and r as above,
    every other step done."""
    out, work = tmp_path / "out", tmp_path / "work"
    proc = _wrapper(out, work, "all", "--limit", "2400", timeout=2500)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = {s["id"]: s for s in manifest(out, "all")["steps"]}
    # 3b runs on a committed trained-activation dump (issue 21 added one), else skips.
    dumps = sorted((ROOT / "reports" / "filtering").glob("trained-*.safetensors"))
    assert status.pop("3b")["status"] == ("done" if dumps else "skipped")
    for sid in ("pk", "pg", "r"):
        assert _done_or_skipped_saying_why(status.pop(sid))
    bad = {k: (v["status"], v["rc"], v["reason"]) for k, v in status.items()
           if v["status"] != "done" or v["rc"] != 0}  # fmt: skip
    assert not bad
    files = packed(out, "all")
    for name in ("gemma2-2b-fwdbwd.json", "cuda-tests.xml", "gemma2-2b.json", "gemma2-2b.md",
                 "ours-curve.jsonl", "gemma2-2b-synthetic.json", "converge.json",
                 "sensitivity.json", "compare.md", "dashboard/index.html", "history.sqlite",
                 "0a-env.log", "0b-methods.log", "gemma2-2b-terms.json",
                 "filtering-gemma2-2b-synthetic.json", "tp1.json", "step-gemma2-2b.json",
                 "slice-tiles.jsonl"):  # fmt: skip
        assert name in files, name


def test_docs_call_1_table_is_the_plan() -> None:
    """docs/gpu.md's call-1 table: the plan's steps, estimates, limits and total."""
    text = (ROOT / "docs" / "gpu.md").read_text()
    section = text[text.index("## Call 1") : text.index("## Call 2")]
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| ")]  # fmt: skip
    steps = _plan()
    ids = [r[0] for r in rows if r[0] in steps]
    assert ids == gpu_plan.CALLS["1"]
    for r in rows:
        if r[0] in steps:
            assert (float(r[2]), float(r[3])) == (steps[r[0]].estimate_s, steps[r[0]].limit_s)
    total = gpu_run.call_estimate([steps[i] for i in gpu_plan.CALLS["1"]])
    (last,) = [r for r in rows if "**call 1**" in r]
    assert last[2:4] == [f"**{total:.0f}**", f"**{gpu_plan.CALL_LIMITS_S['1']:.0f}**"]
    (wheels,) = [r for r in rows if "wheels' install" in r[1]]
    assert float(wheels[2]) == gpu_plan.WHEELS_S
