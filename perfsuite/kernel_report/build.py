"""Build one launch as the JIT would (its heuristics, Triton's own binder), run Triton's
ptxas on it with ``make_cubin``'s flags and read the cubin with cuobjdump."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

from . import sass
from .launches import Launch
from .options import capability, cfg_arch


class BuildError(RuntimeError):
    """ptxas or cuobjdump failed, or their output could not be read."""


def target(arch: str) -> GPUTarget:
    return GPUTarget("cuda", capability(arch), 32)


def gpu_name(arch: str) -> str:
    """The ``--gpu-name`` Triton passes ptxas (``sm_90a`` for capability 90)."""
    # Imported here: a Triton without NVIDIA's backend still imports this module.
    from triton.backends.nvidia.compiler import sm_arch_from_capability

    return sm_arch_from_capability(capability(arch))


def ptxas_path(arch: str) -> str:
    """The ptxas Triton compiles with for ``arch`` (honours ``TRITON_PTXAS_PATH``)."""
    from triton.backends.nvidia.compiler import get_ptxas

    return get_ptxas(capability(arch)).path


def ptxas_version(arch: str) -> str:
    """The CUDA release of the ptxas that builds ``arch`` (``12.8.93``): the same Triton
    can ship two (``ptxas-blackwell`` for sm_100a), and each changes the SASS."""
    out = _run([ptxas_path(arch), "--version"], "ptxas --version").stdout
    found = re.search(r"release [\d.]+, V([\d.]+)", out)
    if not found:
        raise BuildError(f"unreadable ptxas --version: {out.strip()[-300:]!r}")
    return found.group(1)


def tool(name: str) -> str:
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


@dataclass
class Spec:
    """What ``triton.compile`` gets: the JIT's own specialisation of one launch."""

    jit: JITFunction
    signature: dict[str, str]
    constexprs: dict[tuple[int, ...], Any]
    attrs: dict[tuple[int, ...], Any]
    options: dict[str, Any]

    def divisible(self) -> list[str]:
        """Argument names that carry ``tt.divisibility`` 16."""
        return [self.jit.arg_names[k[0]] for k, v in self.attrs.items() if v and len(k) == 1]


def specialise(launch: Launch) -> Spec:
    """Signature, constants, attributes and options of ``launch`` as the JIT builds them."""
    jit, layers = launch.obj, []  # the JIT function under heuristics and autotuners
    while not isinstance(jit, JITFunction):
        if not hasattr(jit, "fn"):
            raise TypeError(f"{jit!r} is not a Triton JIT function (run without TRITON_INTERPRET)")
        if isinstance(getattr(jit, "values", None), dict):
            layers.append(jit.values)
        jit = jit.fn
    kwargs = {"num_warps": launch.num_warps, "num_stages": launch.num_stages, **launch.overrides}
    named = dict(launch.args)
    for values in layers:  # outermost first, as Heuristics.run nests
        for name, heur in values.items():
            if name in launch.overrides:
                continue
            try:
                kwargs[name] = heur({**named, **kwargs})
            except Exception as exc:
                raise BuildError(f"heuristic {name} failed on the launch: {exc!r}") from exc
    named.update({k: v for k, v in kwargs.items() if k in jit.arg_names})
    if missing := [a for a in jit.arg_names if a not in named]:
        raise BuildError(f"{jit.__name__} takes {missing}, which the launch table does not set")
    if unknown := [a for a in launch.args if a not in jit.arg_names]:
        raise BuildError(f"the launch table passes {unknown}, which {jit.__name__} does not take")
    options = {k: v for k, v in kwargs.items() if k not in jit.arg_names}
    options.update(debug=False, instrumentation_mode=knobs.compilation.instrumentation_mode)
    backend = make_backend(target(launch.arch))
    binder = create_function_from_signature(jit.signature, jit.params, backend)
    bound, specialization, opts = binder(**{a: named[a] for a in jit.arg_names}, **options)
    # (parsed options, signature, constexprs, attributes)
    parsed, *packed = jit._pack_args(backend, options, bound, specialization, opts)
    return Spec(jit, *packed, dict(parsed.__dict__))


def _run(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    except OSError as exc:
        raise BuildError(f"{what} could not run ({cmd[0]}): {exc}") from exc
    if out.returncode != 0:
        log = (out.stderr + out.stdout).strip()[-1500:]
        raise BuildError(f"{what} failed (exit {out.returncode}, {cmd[0]}): {log or 'no output'}")
    return out


_PTXAS_STACK = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)


def parse_ptxas(log: str, name: str) -> dict[str, int]:
    """Registers, spills and stack of entry ``name`` from ``ptxas -v``; BuildError if absent."""
    start = log.find(f"Function properties for {name}")
    if f"Compiling entry function '{name}'" not in log or start < 0:
        raise BuildError(f"ptxas -v log names no entry {name!r}: {log.strip()[-800:]!r}")
    tail = log[start:]
    stack = _PTXAS_STACK.search(tail)
    regs = re.search(r"Used (\d+) registers", tail)
    if not stack or not regs:
        raise BuildError(f"unparseable ptxas -v log for {name}: {tail.strip()[:800]!r}")
    keys = ("registers", "stack_bytes", "spill_store_bytes", "spill_load_bytes")
    return dict(zip(keys, map(int, (regs.group(1), *stack.groups())), strict=True))


def parse_res_usage(text: str) -> dict[str, int]:
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", text)
    if not m:
        raise BuildError(f"unparseable cuobjdump -res-usage output: {text.strip()[-500:]!r}")
    reg, stack, shared, local = (int(g) for g in m.groups())
    return {"res_registers": reg, "res_stack": stack, "static_shared": shared, "local": local}


def ctas_per_sm(arch: str, registers: int, shared: int, num_warps: int, tmem: int = 0) -> int:
    """Resident CTAs per SM (0: cannot launch) as the TMA launcher counts them
    (``kernels.hopper.fitting_ctas``), at ``arch``'s limits; ``tmem``: its TMEM columns."""
    from perfsuite.kernels.hopper import fitting_ctas

    return fitting_ctas(registers, shared, num_warps, tmem, cfg_arch(arch))


def build(launch: Launch) -> dict[str, Any]:
    """Compile ``launch``, run ptxas and cuobjdump; the numbers of one report row."""
    spec = specialise(launch)
    src = ASTSource(spec.jit, spec.signature, constexprs=spec.constexprs, attrs=spec.attrs)
    compiled = triton.compile(src, target=target(launch.arch), options=spec.options)
    name = compiled.metadata.name
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        Path(ptx).write_text(compiled.asm["ptx"])
        # Triton's make_cubin command line: line info, -v, its register-allocator flag;
        # --fmad=false when FP fusion is off (Triton 3.10's announced default).
        fmad = [] if spec.options.get("enable_fp_fusion", True) else ["--fmad=false"]
        cmd = [ptxas_path(launch.arch), "-lineinfo", *fmad, "-v", "--regAllocOptLevel=2"]
        out = _run([*cmd, f"--gpu-name={gpu_name(launch.arch)}", ptx, "-o", cubin], "ptxas")
        usage = parse_ptxas(out.stdout + out.stderr, name)
        res = parse_res_usage(_run([tool("cuobjdump"), "-res-usage", cubin], "cuobjdump").stdout)
        text = _run([tool("cuobjdump"), "-sass", cubin], "cuobjdump -sass").stdout
    if (regs := usage["registers"]) != res["res_registers"]:
        raise BuildError(f"ptxas -v says {regs} registers, the cubin {res['res_registers']}")
    instructions = sass.instructions(text)
    if not instructions:
        raise BuildError("cuobjdump -sass listed no instructions")
    shared = int(compiled.metadata.shared) + res["static_shared"]
    tmem = int(getattr(compiled.metadata, "tmem_size", 0) or 0)  # tcgen05 (sm_100) only
    row = {**usage, "local_bytes": res["local"], "shared_bytes": shared, "tmem_cols": tmem}
    row["ctas_per_sm"] = ctas_per_sm(launch.arch, regs, shared, launch.num_warps, tmem)
    row |= sass.counts(instructions)
    row["mma_shape"] = sass.mma_shape(instructions, compiled.asm.get("ttgir", ""))
    row["critical_tensor_ops"] = len(sass.critical_tensor_ops(instructions))
    return row | {"divisible_args": len(spec.divisible()), "sass_hash": sass.digest(instructions)}
