"""Ahead-of-time compile every shipped kernel config for sm_80 / sm_90a, no GPU needed.

For each kernel × variant × pinned config × dtype × arch this builds PTX and a
cubin with ``triton.compile`` and reads registers, spills, stack and shared
memory (``ptxas -v`` and ``cuobjdump -res-usage`` shipped with Triton). A config
that fails to compile or spills makes ``run`` exit nonzero.

Works under ``TRITON_INTERPRET=1``: there every ``@triton.jit`` function, Triton's
own ``tl.cdiv`` included, is an interpreter wrapper fixed at import, so the report
is computed in a child process started without that variable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from dataclasses import dataclass
from typing import Any

import triton
from triton.runtime.jit import JITFunction

DEFAULT_ARCHS = ("sm_80", "sm_90a")
_TL_DTYPES = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}


@dataclass(frozen=True)
class Variant:
    """One compile-time specialisation of a kernel worth checking."""

    name: str
    flags: dict[str, Any]


def _as_jit(obj: Any, _seen: dict[int, JITFunction] | None = None) -> JITFunction:
    """The compilable ``JITFunction`` behind ``obj`` (heuristics / interpreter wrappers)."""
    seen = {} if _seen is None else _seen
    while (
        not isinstance(obj, JITFunction)
        and hasattr(obj, "fn")
        and not callable(getattr(obj, "__code__", None))
    ):
        if type(obj).__name__ == "InterpretedFunction":
            break
        obj = obj.fn
    if isinstance(obj, JITFunction):
        return obj
    fn = obj.fn  # InterpretedFunction: rebuild from the Python function
    if id(fn) in seen:
        return seen[id(fn)]
    globals_ = dict(fn.__globals__)
    rebuilt = types.FunctionType(
        fn.__code__, globals_, fn.__name__, fn.__defaults__, fn.__closure__
    )
    rebuilt.__module__ = fn.__module__
    rebuilt.__qualname__ = fn.__qualname__
    jit = JITFunction(rebuilt)
    seen[id(fn)] = jit
    for name in fn.__code__.co_names:
        value = globals_.get(name)
        if type(value).__name__ == "InterpretedFunction":
            globals_[name] = _as_jit(value, seen)
    return jit


def _tool(name: str) -> str:
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def _target(arch: str) -> Any:
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", int(re.sub(r"\D", "", arch)), 32)


def _specs(dtype: str) -> list[tuple[str, Any, dict[str, str], dict[str, Any], list[Variant]]]:
    """(kernel, jit object, runtime signature, fixed constexprs, variants) per kernel."""
    from perfsuite.kernels import backward, forward, reductions

    t = _TL_DTYPES[dtype]
    f32 = "*fp32"
    fwd_sig = {
        "E": f"*{t}",
        "C": f"*{t}",
        "Targets": "*i64",
        "CBar": f32,
        "LSEPart": f32,
        "TargetPart": f32,
        "SmoothPart": f32,
        "LogitAvg": f32,
        "softcap": "fp32",
        "inv_n": "fp32",
        "N": "i32",
        "V": "i32",
        "D": "i32",
        "split_size": "i32",
        "stride_en": "i32",
        "stride_cv": "i32",
    }
    bwd_sig = {
        "E": f"*{t}",
        "C": f"*{t}",
        "LSE": f32,
        "Targets": "*i64",
        "G": f32,
        "Order": "*i32",
        "dE": f"*{t}",
        "dC": f"*{t}",
        "dELocks": "*i32",
        "dCLocks": "*i32",
        "softcap": "fp32",
        "target_w": "fp32",
        "smooth_w": "fp32",
        "filter_eps": "fp32",
        "N": "i32",
        "V": "i32",
        "D": "i32",
        "stride_en": "i32",
        "stride_cv": "i32",
    }
    unit = {"stride_ed": 1, "stride_cd": 1, "stride_t": 1}
    precision = "ieee" if dtype == "fp32" else "tf32"
    common = {**unit, "DOT_PRECISION": precision, "UPCAST_DOT": False, "EVEN_D": False}
    fwd_variants = [
        Variant(
            "plain",
            {
                "HAS_SMOOTHING": False,
                "HAS_SOFTCAP": False,
                "HAS_LOGIT_AVG": True,
                "SmoothPart": None,
                "CBar": None,
            },
        ),
        Variant(
            "smooth+softcap", {"HAS_SMOOTHING": True, "HAS_SOFTCAP": True, "HAS_LOGIT_AVG": True}
        ),
    ]
    bwd_flags = {
        "FILTER": True,
        "SORTED": True,
        "GROUP_N": backward.GROUP_N,
        "ATOMIC_DE": dtype == "fp32",
        "ATOMIC_DC": dtype == "fp32",
    }
    bwd_variants = [
        Variant("plain", {**bwd_flags, "HAS_SMOOTHING": False, "HAS_SOFTCAP": False}),
        Variant("smooth+softcap", {**bwd_flags, "HAS_SMOOTHING": True, "HAS_SOFTCAP": True}),
    ]
    if dtype != "fp32":
        bwd_variants.append(
            Variant(
                "fp32-accum",
                {
                    **bwd_flags,
                    "HAS_SMOOTHING": True,
                    "HAS_SOFTCAP": True,
                    "ATOMIC_DE": True,
                    "ATOMIC_DC": True,
                    "dE": f32,
                    "dC": f32,
                },
            )
        )
    colsum_sig = {
        "X": f"*{t}",
        "W": f32,
        "Out": f32,
        "R": "i32",
        "D": "i32",
        "rows_per_split": "i32",
        "stride_xr": "i32",
    }
    colsum_common = {"stride_xd": 1, "BLOCK_R": reductions.BLOCK_R, "BLOCK_D": reductions.BLOCK_D}
    colsum_variants = [
        Variant("sum", {"HAS_WEIGHTS": False, "W": None}),
        Variant("weighted", {"HAS_WEIGHTS": True}),
    ]
    return [
        ("column_sum", reductions._column_sum_kernel, colsum_sig, colsum_common, colsum_variants),
        ("forward", forward._forward_kernel, fwd_sig, common, fwd_variants),
        ("backward", backward._backward_kernel, bwd_sig, common, bwd_variants),
    ]


def _parse_usage(ptxas_log: str, cuobjdump_out: str) -> dict[str, int]:
    def num(pattern: str, text: str) -> int:
        m = re.search(pattern, text)
        return int(m.group(1)) if m else 0

    return {
        "registers": num(r"REG:(\d+)", cuobjdump_out) or num(r"Used (\d+) registers", ptxas_log),
        "spill_store_bytes": num(r"(\d+) bytes spill stores", ptxas_log),
        "spill_load_bytes": num(r"(\d+) bytes spill loads", ptxas_log),
        "stack_bytes": num(r"STACK:(\d+)", cuobjdump_out),
    }


def _compile_one(
    jit: JITFunction,
    signature: dict[str, str],
    constexprs: dict[str, Any],
    arch: str,
    num_warps: int,
    num_stages: int,
) -> dict[str, int]:
    from triton.compiler import ASTSource

    sig = dict(signature)
    for name in constexprs:
        sig[name] = "constexpr"
    sig = {name: sig[name] for name in jit.arg_names}
    compiled = triton.compile(
        ASTSource(jit, sig, constexprs=constexprs),
        target=_target(arch),
        options={"num_warps": num_warps, "num_stages": num_stages},
    )
    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, "k.ptx")
        cubin = os.path.join(tmp, "k.cubin")
        with open(ptx, "w") as fh:
            fh.write(compiled.asm["ptx"])
        with open(cubin, "wb") as fh:
            fh.write(compiled.asm["cubin"])
        ptxas = subprocess.run(
            [_tool("ptxas"), f"-arch={arch}", "-v", ptx, "-o", os.path.join(tmp, "v.cubin")],
            capture_output=True,
            text=True,
            check=False,
        )
        usage = subprocess.run(
            [_tool("cuobjdump"), "-res-usage", cubin], capture_output=True, text=True, check=True
        )
    out = _parse_usage(ptxas.stdout + ptxas.stderr, usage.stdout)
    static = re.search(r"SHARED:(\d+)", usage.stdout)
    out["shared_bytes"] = int(compiled.metadata.shared) + (int(static.group(1)) if static else 0)
    return out


def _interpreted() -> bool:
    import triton.language as tl

    return os.environ.get("TRITON_INTERPRET", "0") == "1" or (
        type(tl.cdiv).__name__ == "InterpretedFunction"
    )


def _report_in_child(archs: list[str]) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-m", "perfsuite.kernel_report", "--arch", ",".join(archs), "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"kernel report child failed: {out.stderr[-2000:]}") from None


def kernel_report(archs: list[str]) -> list[dict[str, Any]]:
    """One row per kernel × variant × shipped config × dtype × arch."""
    if _interpreted():
        return _report_in_child(archs)
    from perfsuite.kernels.configs import ARCHS, DTYPE_NAMES, KernelConfig, shipped_configs
    from perfsuite.kernels.reductions import BLOCK_D, BLOCK_R, NUM_WARPS

    rows: list[dict[str, Any]] = []
    jits: dict[str, JITFunction] = {}
    colsum = KernelConfig(BLOCK_R, 0, BLOCK_D, num_warps=NUM_WARPS, num_stages=3)
    shipped = [*shipped_configs()]
    shipped += [("column_sum", arch, dt, colsum) for arch in ARCHS for dt in DTYPE_NAMES.values()]
    for kernel, cfg_arch, dtype, cfg in shipped:
        for arch in archs:
            if not arch.startswith(cfg_arch):
                continue
            for name, obj, signature, common, variants in _specs(dtype):
                if name != kernel:
                    continue
                jit = jits.setdefault(name, _as_jit(obj))
                for variant in variants:
                    sig = {k: v for k, v in signature.items()}
                    flags = dict(variant.flags)
                    for arg in [a for a in flags if a in sig]:
                        if flags[arg] is None:
                            sig.pop(arg)
                        else:
                            sig[arg] = flags.pop(arg)
                    meta = {} if kernel == "column_sum" else cfg.meta(kernel)
                    constexprs = {**common, **flags, **meta}
                    for arg in [a for a, v in variant.flags.items() if v is None]:
                        constexprs[arg] = None
                    row: dict[str, Any] = {
                        "kernel": f"{kernel}[{variant.name}]",
                        "variant": variant.name,
                        "config": f"R{BLOCK_R}-D{BLOCK_D}-w{NUM_WARPS}"
                        if kernel == "column_sum"
                        else cfg.describe(),
                        "dtype": dtype,
                        "arch": arch,
                        "ok": False,
                        "error": None,
                        "registers": None,
                        "spill_store_bytes": None,
                        "spill_load_bytes": None,
                        "stack_bytes": None,
                        "shared_bytes": None,
                    }
                    try:
                        row.update(
                            _compile_one(jit, sig, constexprs, arch, cfg.num_warps, cfg.num_stages)
                        )
                        row["ok"] = True
                    except Exception as exc:  # reported per row, never swallowed
                        row["error"] = f"{type(exc).__name__}: {str(exc).strip()[:500]}"
                    rows.append(row)
    return rows


def failures(rows: list[dict[str, Any]]) -> list[str]:
    """Why each failing row fails: a compile error or any spill."""
    out = []
    for r in rows:
        where = f"{r['kernel']} {r['config']} {r['dtype']} {r['arch']}"
        if not r["ok"]:
            out.append(f"{where}: {r['error']}")
        elif r["spill_store_bytes"] or r["spill_load_bytes"]:
            out.append(
                f"{where}: spills {r['spill_store_bytes']}B st / {r['spill_load_bytes']}B ld"
            )
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--arch",
        default=",".join(DEFAULT_ARCHS),
        help="comma-separated targets (default: sm_80,sm_90a)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")


def run(args: argparse.Namespace) -> int:
    archs = [a.strip() for a in args.arch.split(",") if a.strip()]
    bad_arch = [a for a in archs if not re.fullmatch(r"sm_\d+a?", a)]
    if bad_arch:
        raise SystemExit(f"bad --arch {bad_arch}: use e.g. sm_80,sm_90a")
    rows = kernel_report(archs)
    problems = failures(rows)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        table = Table(
            title="Triton kernels compiled ahead of time "
            "(smem: bytes per block; spills, stack: bytes per thread)"
        )
        # (header, row key); variant names like "[plain]" would read as rich markup
        # inside the kernel name, so they get a column of their own.
        cols = (
            ("kernel", "kernel"),
            ("variant", "variant"),
            ("config", "config"),
            ("dtype", "dtype"),
            ("arch", "arch"),
            ("ok", "ok"),
            ("regs", "registers"),
            ("spill st", "spill_store_bytes"),
            ("spill ld", "spill_load_bytes"),
            ("stack", "stack_bytes"),
            ("smem", "shared_bytes"),
        )
        for header, _ in cols:
            numeric = header in ("regs", "spill st", "spill ld", "stack", "smem")
            table.add_column(header, justify="right" if numeric else "left")
        for r in rows:
            cells = {**r, "kernel": r["kernel"].split("[")[0]}
            table.add_row(*("-" if cells[k] is None else escape(str(cells[k])) for _, k in cols))
        console = Console()
        if not console.is_terminal:  # a CI log or a file: rows whole, not squeezed to 80
            console = Console(width=160)
        console.print(table)
        for p in problems:
            console.print(f"[red]FAIL[/red] {p}")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="perfsuite kernel-report", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
