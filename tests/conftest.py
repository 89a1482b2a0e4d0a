"""Shared fixtures: the fake-method plugin on PERFSUITE_PLUGINS for worker processes."""

from __future__ import annotations

import contextlib
import fcntl
import gc
import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugins import use_plugins
from process_guard import watch
from step.stepping import METHODS, QUICK, Ran, step

from perfsuite.checkout import drop_checkout_root
from perfsuite.results.results import load_results

# `python -m pytest` puts the checkout's root on sys.path, where our kernels/ would be
# taken for Hugging Face's `kernels` by transformers (issue 20). The tests import
# their helpers from tests/ (pytest's rootdir entry), never through the root.
drop_checkout_root()


def write_bytecode() -> None:
    """Compiled modules cached for every process the session starts (under
    PYTHONDONTWRITEBYTECODE each would compile perfsuite again, ~0.5 s apiece)."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


write_bytecode()
# No collections while collection imports torch and the rest (they found nothing to
# free, ~1 s a process): pytest_collection_finish turns them on.
gc.disable()

# This session's TMPDIR, for it and every process it starts, removed at the end (issue
# 20: a test run left /tmp/perfsuite-* folders behind).
SESSION_TMP: Path | None = None


def pytest_sessionstart(session: pytest.Session) -> None:
    global SESSION_TMP
    # pytest's own tmp_path folders stay where they were (short paths in the messages
    # the tests read): fix its base before TMPDIR moves.
    session.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    SESSION_TMP = Path(tempfile.mkdtemp(prefix="pst-session-"))
    one_thread()
    os.environ["TMPDIR"] = str(SESSION_TMP)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def one_thread() -> None:
    """torch and the BLAS and OpenMP pools on one thread in the test process: on 2 cores
    shared by the xdist workers a thread team waits for a descheduled member, which
    doubled the kernel tests' CPU time (the harness sets the workers' threads)."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if SESSION_TMP is not None:
        shutil.rmtree(SESSION_TMP, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_leftover_temporary_folders() -> Iterator[None]:
    """A test (or the perfsuite code it runs) removes every perfsuite-* folder it made."""
    before = set(Path(tempfile.gettempdir()).glob("perfsuite-*"))
    yield
    left = set(Path(tempfile.gettempdir()).glob("perfsuite-*")) - before
    for path in left:
        shutil.rmtree(path, ignore_errors=True)
    assert not left, f"temporary folders left behind: {sorted(p.name for p in left)}"


@pytest.fixture
def fake_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registers tests/plugins/fake_methods.py, here and in every worker started."""
    use_plugins(monkeypatch, "plugins.fake_methods")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): a worker a core, at most four (each test may
    start processes of its own)."""
    return min(len(os.sched_getaffinity(0)), 4)


@pytest.hookimpl(trylast=True)  # after pytest's own reordering (by fixture scope)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests (kernel grids, end-to-end runs) need ``-m slow`` or PERFSUITE_SLOW=1;
    then the modules run in the order ``module_rank`` gives."""
    if "slow" not in (config.option.markexpr or "") and os.environ.get("PERFSUITE_SLOW") != "1":
        skip = pytest.mark.skip(reason="slow on a 2-core CPU: run with -m slow or PERFSUITE_SLOW=1")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)
    rank: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        rank[module] = min(rank.get(module, 2), item_rank(item))
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])  # stable: modules whole


def item_rank(item: pytest.Item) -> int:
    """Where a test's module runs: the smoke step's readers first (0), then the modules
    whose tests start processes (1), the in-process rest last (2). xdist hands each worker
    consecutive tests: the smoke readers land on one worker (the other does not wait on its
    lock), and the suite ends on short tests, not on one worker's minute-long set-up while
    the other core idles. A module stays whole (its fixtures are made once)."""
    if item.get_closest_marker("skip") is not None:
        return 2
    if "smoke_run" in getattr(item, "fixturenames", ()):
        return 0
    return 1 if item.get_closest_marker("integration") is not None else 2


@pytest.fixture(autouse=True)
def unit_tests_stay_in_process(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """A test that starts a process (tests/process_guard.py says which count) is marked
    ``integration``: ``-m "not integration"`` is the fast in-process set.
    ``PERFSUITE_SPAWN_LOG=FILE`` lists every process a test starts instead of failing."""
    marked = request.node.get_closest_marker("integration") is not None
    log = os.environ.get("PERFSUITE_SPAWN_LOG")
    if marked and not log:
        yield
        return
    started = watch(monkeypatch)
    yield
    if log:
        with open(log, "a") as f:
            mark = "integration" if marked else "UNMARKED"
            f.writelines(f"{request.node.nodeid}\t{mark}\t{words}\n" for words in started)
    elif started:
        pytest.fail(f"starts a process ({started[0]}): mark it @pytest.mark.integration")


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    """One smoke step run through the real entry point for the tests that read it: every method
    (one-file: the plugin; HERE's served in this process), β 0 and 0.1, a real preset over the
    memory limit. Under xdist the first worker to ask runs it and the others read what it left."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's
    out, said = shared / "step-smoke.json", shared / "step-smoke.console.json"
    with open(shared / "step-smoke.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if said.exists():
            ran = json.loads(said.read_text())
            document = load_results(out) if out.exists() else None
            return Ran(ran["code"], ran["out"], ran["err"], Path(out), document)
        # llama3.2-1b needs ~7 GiB: over 2G it is a skipped row; smoke fits in far less.
        argv = ["--model", "smoke,llama3.2-1b", "--methods", METHODS, "--memory-limit", "2G"]
        from step.stepping import HERE, served_here

        with pytest.MonkeyPatch.context() as mp:
            use_plugins(mp, "plugins.one_file_method")
            served_here(mp, "perfsuite.step.runner.StepKind", HERE, shared)
            ran = step([*argv, *QUICK], out)
        said.write_text(json.dumps({"code": ran.code, "out": ran.out, "err": ran.err}))
        return ran


@pytest.fixture(scope="session")
def cheap_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One cheap run through the real entry point (tests/test_cli.py, test_every_command.py
    read it): over an existing file with --force, under umask 022, the shape named twice,
    eager at β 0 and 0.1, every phase; its file and its console output."""
    from perfsuite.cli import main

    out = tmp_path_factory.mktemp("cheap") / "r.json"
    out.write_text("old")
    argv = ["run", "--shape", "smoke, smoke", "--methods", "eager", "--samples", "2", "--force"]
    old, printed = os.umask(0o022), io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            code = main([*argv, "--out", str(out)])
    finally:
        os.umask(old)
    assert code == 0, printed.getvalue()
    return out, printed.getvalue()


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported lives as long as the session: out of the collector's
    full passes (in-process tests spent ~13% of their time there)."""
    gc.collect()
    gc.freeze()
    gc.enable()
