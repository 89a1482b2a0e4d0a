"""Shared fixtures: the fake-method plugin on PERFSUITE_PLUGINS for worker processes."""

from __future__ import annotations

import fcntl
import gc
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
    """Compiled modules cached for this session and every process it starts (~130
    Pythons, which in a fresh clone under PYTHONDONTWRITEBYTECODE would each compile
    perfsuite again, ~0.5 s apiece); ``__pycache__`` is git-ignored."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


write_bytecode()
# No collections while collection imports torch, transformers and every test module
# (they found nothing to free, ~1 s a process): pytest_collection_finish turns them on.
gc.disable()

TESTS = Path(__file__).resolve().parent
# This session's temporary folder (TMPDIR for it and every process it starts): what a
# test leaves there is seen, and the whole folder goes at the end (issue 20: a test
# run left /tmp/perfsuite-* folders behind).
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
    """torch and the BLAS and OpenMP pools (numpy's OpenBLAS computes every tile of
    Triton's interpreter) on one thread in the test process: its ops are small, and on
    2 cores shared by the xdist workers a thread team waits for a descheduled member,
    which doubled the CPU time of the kernel tests. The processes a test starts are
    untouched (the harness sets the workers' threads)."""
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
    from plugins import use_plugins

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
    """Where a test's module runs: the readers of the session's smoke step run first (0),
    then the modules whose tests start processes (1), the in-process rest last (2).

    xdist (``--dist load``) hands each worker a run of consecutive tests, then more as it
    drains: the modules that take the smoke run as a fixture land on one worker, which
    runs it while the other works on (not both, one waiting on the other's lock; the
    readers that ask for it later find it made), and the long process-starting
    tests come first, so that the suite ends on short ones, not on one worker's last
    minute-long set-up while the other core idles. A module stays whole (its
    module-scoped fixtures are made once)."""
    if item.get_closest_marker("skip") is not None:
        return 2
    if "smoke_run" in getattr(item, "fixturenames", ()):
        return 0
    return 1 if item.get_closest_marker("integration") is not None else 2


@pytest.fixture(autouse=True)
def unit_tests_stay_in_process(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """The two sets stay apart: a test that starts a process (a worker, torchrun's ranks,
    a compiler, Chromium, a wheel build; git's and uname's reads and a library's own
    build steps and probes aside, tests/process_guard.py) is marked ``integration``, and
    ``-m "not integration"`` is the fast in-process set. ``PERFSUITE_SPAWN_LOG=FILE``
    lists every process a test starts, marked or not (the suite's process count: the
    processes those start are not in it), instead of failing the unmarked."""
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
    """One smoke step run through the real entry point, shared by the tests that read it
    (tests/step/, the entry-point and plugin tests): every method here (torch-compile
    is the slow tests'; one-file is the plugin declared in one file), β 0 and 0.1, and a
    real preset too big for the memory limit beside it. Under xdist the first worker to
    ask runs it and the others read what it left (a session fixture is per worker)."""
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
        with pytest.MonkeyPatch.context() as mp:
            use_plugins(mp, "plugins.one_file_method")
            ran = step([*argv, *QUICK], out)
        said.write_text(json.dumps({"code": ran.code, "out": ran.out, "err": ran.err}))
        return ran


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, transformers, every test module) lives as long as
    the session: out of the collector's full passes, which scanned it again and again
    (in-process tests spent ~13% of their time there)."""
    gc.collect()
    gc.freeze()
    gc.enable()
