"""The suite's process guard (tests/conftest.py): which processes a test starts, less
git's and uname's reads (a results file's provenance) and Triton's own build steps and
probes (ptxas, its launcher's C compiler and ``file``, ``ldconfig -p``, cuobjdump: they
failed 5 of the kernel's CUDA tests at teardown on the H200, issue 45). Those pass only
when Triton's code starts one of its tools; the same program started by a test counts."""

from __future__ import annotations

import importlib.util
import multiprocessing.util
import os
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import FrameType

import pytest

READS = ("git", "uname")
# Triton's own: its bundled NVIDIA toolchain, the loader's cache (libcuda), and for its
# launcher the C compiler runtime/build.py picks ($CC, else gcc or clang) and `file`.
TRITON_TOOLS = frozenset({"ptxas", "ptxas-blackwell", "cuobjdump", "nvdisasm", "ldconfig", "file"})
COMPILERS = frozenset({"gcc", "clang", "cc"})


@cache
def _stdlib() -> tuple[str, tuple[str, ...]]:
    """The standard library's folder, and the site folders inside it that are not."""
    paths = sysconfig.get_paths()
    site = tuple({str(Path(paths[k]).resolve()) + os.sep for k in ("purelib", "platlib")})
    return str(Path(paths["stdlib"]).resolve()) + os.sep, site


@cache
def _package_root(name: str) -> str | None:
    """Where an installed package lives (found without importing it)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(next(iter(spec.submodule_search_locations))).resolve()) + os.sep


@cache
def _real(filename: str) -> str:
    return str(Path(filename).resolve())


def _caller(frame: FrameType | None) -> str | None:
    """The file of the first frame outside the standard library beyond ``Popen``'s own:
    who asked for the process (subprocess, platform, functools stand between; wrappers
    of ``_execute_child``, this guard's and a test's, are inside ``Popen`` and ignored)."""
    stdlib, site = _stdlib()
    popen = _real(subprocess.__file__)
    past_popen = False
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<"):
            path = _real(name)
            if path == popen:
                past_popen = True
            elif past_popen and not (path.startswith(stdlib) and not path.startswith(site)):
                return path
        frame = frame.f_back
    return None


def _program(words: list) -> str:
    return os.path.basename(os.fsdecode(words[0]).split()[0]) if words else ""


def _words(words: list) -> str:
    """A process's first four words (a worker's module is its fourth), one line each."""
    return " ".join((os.fsdecode(w).splitlines() or [""])[0] for w in words[:4])


def triton_step(program: str, frame: FrameType | None) -> bool:
    """Whether Triton's own code starts ``program`` as one of its tools (``frame``: the
    start's frame); if not, the process is the test's."""
    root, caller = _package_root("triton"), _caller(frame)
    if root is None or caller is None or not caller.startswith(root):
        return False
    cc = os.path.basename(os.environ.get("CC", "").split(" ")[0])
    return program in TRITON_TOOLS or program in COMPILERS or (bool(cc) and program == cc)


def watch(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record, from now until ``monkeypatch`` undoes it, each process started that is the
    test's own (its first four words, each its first line), in the list returned."""
    started: list[str] = []
    execute: Callable = subprocess.Popen._execute_child  # type: ignore[attr-defined]
    spawn = multiprocessing.util.spawnv_passfds

    def execute_child(self, args, *rest, **kw):  # noqa: ANN001, ANN202
        words = [args] if isinstance(args, (str, bytes)) else list(args)
        program = _program(words)
        if program not in READS and not triton_step(program, sys._getframe(1)):
            started.append(_words(words))
        return execute(self, args, *rest, **kw)

    def spawnv_passfds(path, args, passfds):  # noqa: ANN001, ANN202
        started.append(_words(list(args)))
        return spawn(path, args, passfds)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", execute_child)
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", spawnv_passfds)
    return started
