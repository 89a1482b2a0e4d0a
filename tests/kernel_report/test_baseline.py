"""``kernel-report --save`` / ``--baseline``: GPU code changes caught without a GPU.

The smallest selection that has two variants (the target-logit kernel, bf16, sm_90a:
two builds, each one ptxas and two cuobjdump runs) is built once per module and stored;
the comparisons run ``perfsuite.cli.main`` as a user types it on that build. It is built
in a child process started in a temporary copy of the tree, which then edits the kernel
(a comment, a smaller tile) and builds it again.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import triton

from perfsuite import kernel_report
from perfsuite.cli import main
from perfsuite.kernel_report import build

# Every test here compiles through ptxas and cuobjdump: other processes.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not os.path.exists(build.tool("ptxas")), reason="triton without NVIDIA tools"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
SELECTION = ["--arch", "sm_90a", "--dtype", "bf16", "--kernel", "target_logit", "--no-cce"]
FILE = f"triton-{triton.__version__}_sm_90a.json"
VARIANTS = ("plain", "softcap")
BUILDS = len(VARIANTS)
HEAVY = "target_logit[softcap] N32-D128-w4 bf16 sm_90a"


@pytest.fixture(scope="module")
def child(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One child in a copy of the checkout's package (its kernels, not ours) runs
    ``kernel-report`` as typed three times: ``--save`` of the selection, then
    ``--baseline`` of it after each edit of ``kernels/targets.py`` (a comment more, then a
    smaller tile: the file edited, its module reloaded); each run's exit status, stdout
    and stderr, and the folder saved to."""
    tree, folder = tmp_path_factory.mktemp("tree"), tmp_path_factory.mktemp("kernel-baseline")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "perfsuite", tree / "perfsuite", symlinks=True, ignore=ignore)
    shutil.copytree(ROOT / "kernels", tree / "kernels", ignore=ignore)
    (tree / "baselines").symlink_to(ROOT / "baselines")
    argv = ["kernel-report", *SELECTION, "--jobs", "2"]
    comment = "    # a comment, and the lines below move down\n\n"
    code = f"""
        import contextlib, importlib, io, json, pathlib
        from perfsuite.cli import main
        import perfsuite.kernels.configs as configs
        from perfsuite.kernels import targets

        def report(*extra):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                return [main([*{argv}, *extra]), out.getvalue(), err.getvalue()]

        def edit(old, new):
            path = pathlib.Path(targets.__file__)
            assert path.read_text().count(old) == 1, old
            path.write_text(path.read_text().replace(old, new))
            importlib.reload(targets)

        said = {{"save": report("--json", "--save", {str(folder)!r})}}
        edit("    n_mask = offs_n < N\\n", {comment!r} + "    n_mask = offs_n < N\\n")
        said["comment"] = report("--baseline", {str(folder)!r})
        edit("\\nBLOCK_N = 32\\n", "\\nBLOCK_N = 16\\n")
        said["tile"] = report("--baseline", {str(folder)!r})
        from triton.runtime.cache import triton_key  # hashed here, before the pool forks
        said["keyed"] = triton_key.cache_info().currsize
        print(json.dumps({{"kernels": configs.__file__, **said}}))
    """
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tree,
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "250"},  # a table row on one line
        check=False,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return {"tree": tree, "folder": folder, **json.loads(out.stdout)}


@pytest.fixture(scope="module")
def stored(child: dict) -> tuple[Path, dict, str]:
    """The selection built and saved; (folder, the --json document it printed, its
    stderr)."""
    code, out, err = child["save"]
    assert code == 0, err[-3000:]
    assert f"saved {child['folder'] / FILE}" in err
    return child["folder"], json.loads(out), err


def test_save_writes_the_json_rows_and_says_its_progress(stored):
    folder, printed, stderr = stored
    assert [p.name for p in folder.iterdir()] == [FILE]  # one file per Triton and arch set
    doc = json.loads((folder / FILE).read_text())
    assert doc["rows"] == printed["rows"] and len(doc["rows"]) == BUILDS
    assert doc["toolchain"]["triton"] == triton.__version__
    assert doc["toolchain"]["ptxas"]["sm_90a"].startswith(("12.", "13."))
    assert doc["shape"]["name"] == "gemma2-2b" and doc["shape"]["v"] == 256000
    selection = doc["selection"]
    assert selection["archs"] == ["sm_90a"] and selection["kernels"] == ["target_logit"]
    # one build per line, so a renewal's git diff names the builds it changes
    lines = (folder / FILE).read_text().splitlines()
    assert sum('"kernel": "target_logit"' in line for line in lines) == BUILDS
    # Progress on stderr (stdout is --json's): `--save DIR` printed nothing for 400 s
    # (issue 46). A line as it starts, then one per build with the count, the time so far
    # and the time left.
    lines = stderr.splitlines()
    assert lines[0] == f"building {BUILDS} kernel launch(es), 2 at a time"
    built = [line for line in lines if line.startswith("built target_logit[")]
    variants = {line.split("[")[1].split("]")[0] for line in built}
    assert len(built) == BUILDS and variants == set(VARIANTS)
    assert f"({BUILDS} of {BUILDS}; " in built[-1] and "left)" in built[0]


def _compare(stored, folder: Path, monkeypatch, *extra: str) -> int:
    """``kernel-report --baseline FOLDER`` as typed, its build the stored one's (building
    this tree again is the tests' below, in a copy of it): the comparison and its table."""
    monkeypatch.setattr(kernel_report, "kernel_report", lambda *a, **k: copy.deepcopy(stored[1]))
    return main(["kernel-report", *SELECTION, "--jobs", "2", "--baseline", str(folder), *extra])


def test_the_same_builds_compare_unchanged(stored, capsys, monkeypatch):
    folder, _, _ = stored
    before = {p: p.stat().st_mtime_ns for p in folder.iterdir()}
    monkeypatch.setenv("COLUMNS", "80")
    assert _compare(stored, folder, monkeypatch) == 0
    out = capsys.readouterr().out
    assert f"unchanged: {BUILDS} builds (same SASS)" in out, out
    assert "changed: 0 builds, 0 failing" in out and "only in" not in out
    assert max(map(len, out.splitlines())) <= 80
    assert {p: p.stat().st_mtime_ns for p in folder.iterdir()} == before  # read-only


def _doctored(folder: Path, dest: Path, name: str = FILE) -> Path:
    """The stored baseline with one build made better than this tree's: fewer registers,
    one more CTA per SM, 10 % fewer instructions, another SASS hash."""
    doc = json.loads((folder / FILE).read_text())
    doc["toolchain"]["triton"] = name.split("_")[0].removeprefix("triton-")
    (row,) = [r for r in doc["rows"] if r["variant"] == "softcap"]
    row["registers"] -= 20
    row["ctas_per_sm"] += 1
    row["instructions"] = int(row["instructions"] / 1.10)
    row["sass_hash"] = "0" * 12
    dest.mkdir(parents=True, exist_ok=True)
    (dest / name).write_text(json.dumps(doc))
    return dest


def test_a_better_baseline_fails_naming_the_build(stored, tmp_path, capsys, monkeypatch):
    """... unless it is another Triton's, compared with --across-triton: never failed."""
    monkeypatch.setenv("COLUMNS", "200")  # a table row on one line
    assert _compare(stored, _doctored(stored[0], tmp_path / "same"), monkeypatch) == 1
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "FAIL" in line]
    (row,) = [r for r in stored[1]["rows"] if r["variant"] == "softcap"]
    regs, ctas = row["registers"], row["ctas_per_sm"]
    assert line.split()[:4] == HEAVY.split(), out
    assert f"registers {regs - 20} → {regs}, CTAs/SM {ctas + 1} → {ctas}, instructions" in line
    assert "FAIL: fewer CTAs/SM, instructions +10." in line
    assert "unchanged: 1 build (same SASS)" in out  # the other variant
    assert "changed: 1 build, 1 failing" in out
    other = _doctored(stored[0], tmp_path / "other", "triton-0.0.1_sm_90a.json")
    assert _compare(stored, other, monkeypatch, "--across-triton") == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "gated" in line]
    assert line.split()[:4] == HEAVY.split(), out
    assert "not gated (across Triton versions); would fail: fewer CTAs/SM" in line
    assert "baseline: Triton 0.0.1" in out
    assert "changed: 1 build, 0 failing" in out


def test_another_triton_version_none_or_a_file_is_one_error_line(stored, tmp_path, capsys):
    """No build: the baseline is looked for before any work."""
    other = _doctored(stored[0], tmp_path / "other", "triton-0.0.1_sm_90a.json")
    cases = ((other, "Triton 0.0.1's baseline"), (tmp_path / "empty", "no baseline for Triton"))
    for folder, named in cases:
        folder.mkdir(exist_ok=True)
        assert main(["kernel-report", *SELECTION, "--baseline", str(folder)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("error: ") and err.count("\n") == 1, err
        assert named in err and f"--save {folder}" in err and "--kernel target_logit" in err
        assert ("--across-triton" in err) == (folder == other)
    saved = stored[0] / FILE  # the file, not its folder
    assert main(["kernel-report", *SELECTION, "--baseline", str(saved)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: --baseline {saved}: is a file")
    assert err.endswith(f"the folder that holds it is {stored[0]}\n")


def test_a_comment_leaves_every_sass_hash_the_same(child):
    code, out, err = child["comment"]
    assert child["kernels"] == str(child["tree"] / "perfsuite" / "kernels" / "configs.py")
    assert code == 0, err[-3000:]
    assert f"unchanged: {BUILDS} builds (same SASS)" in out, out
    assert child["keyed"] == 1  # not once in each builder


def test_a_smaller_tile_is_named(child):
    code, out, err = child["tile"]
    assert code == 0, err[-3000:]  # a new config is listed, never failed
    assert "unchanged: 0 builds (same SASS)" in out, out
    retuned = "config N32-D128-w4 → N16-D128-w4"
    lines = [line.split(maxsplit=3) for line in out.splitlines() if retuned in line]
    assert sorted(line[0] for line in lines) == [f"target_logit[{v}]" for v in VARIANTS]
    assert all(line[1:3] == ["bf16", "sm_90a"] for line in lines)
    assert all("not gated (config changed)" in line[3] for line in lines)
