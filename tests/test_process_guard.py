"""The suite's process guard: Triton compiling for a GPU (ptxas, its launcher's C
compiler, the libcuda probe, SASS) is no test starting a process (issue 45: 5 of the
kernel's CUDA tests failed at teardown on the H200), while the same programs started by
a test still count. The compile is Triton's real one, for sm_90, on the CPU."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton
import triton.language as tl
from process_guard import watch
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia import driver
from triton.compiler import ASTSource
from triton.runtime.build import compile_module_from_src
from triton.runtime.jit import JITFunction

EXTENSION = """#include <Python.h>
static struct PyModuleDef probe = {PyModuleDef_HEAD_INIT, "guard_probe", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_guard_probe(void) { return PyModule_Create(&probe); }
"""


# Triton's interpreter (TRITON_INTERPRET=1, set by tests/kernels/) leaves tl.core patched
# after a kernel's device function (tl.max, tl.sum) ran, and a real compile later in the
# process fails: the language as collection found it is put back for the compile.
_LANGUAGE = (tl, tl.core, tl.math, tl.core.tensor, tl.core.dtype, tl.core.tensor_descriptor_base)
_AS_COLLECTED = [dict(vars(obj)) for obj in _LANGUAGE]


def language_as_collected(monkeypatch: pytest.MonkeyPatch) -> None:
    """Undo, for this test, what the interpreter left patched in ``triton.language``."""
    for obj, before in zip(_LANGUAGE, _AS_COLLECTED, strict=True):
        now = dict(vars(obj))
        for name in now.keys() - before.keys():
            monkeypatch.delattr(obj, name)
        for name, value in before.items():
            if now.get(name) is not value:
                monkeypatch.setattr(obj, name, value, raising=False)


def _copy(x, y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + i, tl.load(x + i, mask=i < n), mask=i < n)


def record_starts(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every process started from now on (guarded or not), as its words."""
    seen: list[list[str]] = []
    execute = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def execute_child(self, args, *rest, **kw):  # noqa: ANN001, ANN202
        words = [args] if isinstance(args, (str, bytes)) else list(args)
        seen.append([os.fsdecode(w) for w in words])
        return execute(self, args, *rest, **kw)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", execute_child)
    return seen


def triton_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What Triton starts on a GPU's first kernel, here on the CPU: an sm_90 compile
    (ptxas), its SASS (cuobjdump), the libcuda probe (ldconfig) and a launcher-like
    module built by its C compiler, in an empty cache so that nothing is skipped."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    language_as_collected(monkeypatch)
    signature = {"x": "*fp32", "y": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    # JITFunction, not @triton.jit: under TRITON_INTERPRET=1 (tests/kernels/ on a CPU)
    # the decorator gives the interpreter's function, which compiles nothing
    source = ASTSource(JITFunction(_copy), signature=signature, constexprs={"BLOCK": 64})
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32))
    assert "LDG" in kernel.asm["sass"]  # cuobjdump's disassembly of the cubin
    with contextlib.suppress(AssertionError):  # no libcuda.so.1 on a CPU machine
        driver.libcuda_dirs.__wrapped__()
    assert compile_module_from_src(EXTENSION, "guard_probe").__name__ == "guard_probe"


def test_a_triton_compile_starts_no_process_of_the_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unmarked: the suite's own guard (conftest) fails it at teardown if it counts
    these; ``watch`` here says so before that."""
    seen = record_starts(monkeypatch)
    counted = watch(monkeypatch)
    triton_builds(tmp_path, monkeypatch)
    programs = {Path(words[0]).name: words for words in seen}
    assert programs["ptxas"][1:3] == ["-lineinfo", "-v"]  # the H200's call, really made
    assert {"cuobjdump", "ldconfig"} <= programs.keys()
    assert programs["ldconfig"] == ["/sbin/ldconfig", "-p"]
    assert any(Path(w[0]).name in {"gcc", "clang", "cc"} for w in seen)  # the C compiler
    assert counted == []


@pytest.mark.integration
def test_the_same_programs_started_by_a_test_still_count(monkeypatch: pytest.MonkeyPatch) -> None:
    counted = watch(monkeypatch)
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    subprocess.run([str(ptxas), "--version"], check=True, capture_output=True)
    subprocess.run(["/sbin/ldconfig", "-p"], check=True, capture_output=True)
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert [c.split()[0] for c in counted] == [str(ptxas), "/sbin/ldconfig", sys.executable]
