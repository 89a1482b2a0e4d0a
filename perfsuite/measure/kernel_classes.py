"""Which class a profiled kernel or CPU op belongs to (``CLASSES``). Ours and the peers'
Triton kernels are read from the source, never imported; a name no rule knows is ``other``.
No torch import: the renderer reads ``CLASSES`` without paying for it."""

from __future__ import annotations

import ast
import importlib.util
from functools import lru_cache
from pathlib import Path

# In the order a stacked bar draws them; every breakdown has each key.
CLASSES = ("gemm", "ours", "peer", "elementwise", "copy", "collective", "other")
KERNELS_DIR = Path(__file__).resolve().parents[1] / "kernels"

GEMM_OPS = frozenset(
    "mm addmm bmm baddbmm addbmm matmul linear _scaled_mm addmv mv dot vdot einsum "
    "_addmm_activation mkldnn_linear tensordot bilinear".split()
)
# cuBLAS (sgemm, nvjet on Hopper, cublasLt split-K), CUTLASS, Inductor's mm templates.
GEMM_KERNELS = tuple(
    "gemm gemv xmma nvjet cublas wgmma matmul cutlass splitkreduce triton_tem_".split()
)
COLLECTIVES = tuple(
    "nccl gloo c10d:: all_reduce allreduce all_gather allgather reduce_scatter reducescatter "
    "all_to_all alltoall broadcast_".split()
)
COPY_OPS = frozenset(
    "copy_ to _to_copy clone fill_ zero_ zeros zeros_like ones ones_like full full_like "
    "new_zeros new_ones new_full new_empty_strided contiguous cat stack index_copy_ "
    "_copy_from _copy_from_and_resize".split()
)
COPY_KERNELS = ("memcpy", "memset", "copy", "fill", "catarray")
ELEMENTWISE_WORDS = tuple(
    "softmax logsumexp nll_loss cross_entropy sum mean amax amin max min norm reduce scatter "
    "gather index where masked elementwise vectorized unrolled triton_poi_ triton_red_ "
    "triton_per_ cunn_ cumsum argmax argmin topk dropout loss lerp clamp".split()
)
# On CPU, Inductor's generated C++ kernels (fused elementwise ops and reductions) run
# inside this range with no op of their own: its self time is theirs.
INDUCTOR_CPU_GRAPH = "## call compiledfxgraph "
# CUTLASS's CuTe DSL names its kernels kernel_cutlass_<function> (QuACK's cross-entropy):
# not a GEMM unless the name says so.
CUTE_DSL_PREFIX = "kernel_cutlass_"


def jit_names(files: list[Path]) -> frozenset[str]:
    """Names of the functions decorated ``@triton.jit`` (or ``@jit``, or ``@triton.jit(...)``)
    in ``files``; files that do not parse are skipped."""
    names = set()
    for path in files:
        try:
            text = path.read_text()
            if "jit" not in text:  # most files: no parse
                continue
            tree = ast.parse(text, str(path))
        except (OSError, UnicodeDecodeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and any(map(_is_jit, node.decorator_list)):
                names.add(node.name)
    return frozenset(names)


def _is_jit(decorator: ast.expr) -> bool:
    return ast.unparse(decorator).split("(")[0].rsplit(".", 1)[-1] == "jit"


@lru_cache(maxsize=1)
def ours_names() -> frozenset[str]:
    """Our Triton kernels: the ``@triton.jit`` functions of ``kernels/*.py``."""
    return jit_names(sorted(KERNELS_DIR.glob("*.py")))


@lru_cache(maxsize=1)
def peer_names() -> frozenset[str]:
    """The installed peers' Triton kernels (none when a peer is not installed); which
    packages are the peers' is the methods' declarations' (``triton_packages``)."""
    from perfsuite.plan.registry import triton_packages

    files: list[Path] = []
    for package in triton_packages():
        spec = importlib.util.find_spec(package)  # finds, does not import
        for folder in (spec.submodule_search_locations or []) if spec else []:
            files += sorted(Path(folder).rglob("*.py"))
    return jit_names(files) - ours_names()


GENERIC = frozenset({"kernel", "Kernel", "Kernel2", "device_kernel"})  # CUTLASS's wrappers


def kernel_name(name: str) -> str:
    """A kernel's short name: no return type, namespace, template arguments or parameter
    list (``void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`` ->
    ``vectorized_elementwise_kernel``); a CUTLASS wrapper's (``cutlass::Kernel2<X>``) is
    its first template argument's; an op's name (``aten::mm``) as it is."""
    if name.startswith("aten::"):
        return name
    if name.lower().startswith(INDUCTOR_CPU_GRAPH):  # "## Call CompiledFxGraph <hash> ##"
        return "CompiledFxGraph " + name[len(INDUCTOR_CPU_GRAPH) :].strip(" #")[:8]
    text = name.removeprefix("void ").replace("(anonymous namespace)", "anonymous").strip()
    depth, base, first, args = 0, [], [], 0
    for char in text:
        if char == "(" and depth == 0 and base:
            break  # the parameter list
        if char == "<":
            depth += 1
            args += depth == 1
        elif char == ">" and depth > 0:
            depth -= 1
        elif depth == 0:
            base.append(char)
        elif depth == 1 and args == 1:
            first.append(char)
    short = "".join(base).strip().rsplit("::", 1)[-1].strip()
    if short in GENERIC and first:
        short = "".join(first).split(",")[0].strip().rsplit("::", 1)[-1]
    return short or name


def classify(name: str) -> str:
    """The class of kernel or op ``name`` (one of ``CLASSES``)."""
    short = kernel_name(name)
    if short in ours_names():
        return "ours"
    if short in peer_names():
        return "peer"
    lower = name.lower()
    op = lower.rsplit("::", 1)[-1] if lower.startswith(("aten::", "prims::")) else None
    if any(word in lower for word in COLLECTIVES):
        return "collective"
    if op is not None:
        if op in GEMM_OPS or op.rstrip("_") in GEMM_OPS:  # addmm_: the in-place form
            return "gemm"
        if op in COPY_OPS:
            return "copy"
        if _pointwise(op) or any(word in op for word in ELEMENTWISE_WORDS):
            return "elementwise"
        return "other"
    if lower.startswith(INDUCTOR_CPU_GRAPH):
        return "elementwise"
    cute = lower.startswith(CUTE_DSL_PREFIX)
    if any(word in lower for word in GEMM_KERNELS if not (cute and word == "cutlass")):
        return "gemm"
    if cute or "quack" in lower:
        return "peer"
    if any(word in lower for word in COPY_KERNELS):
        return "copy"
    if any(word in lower for word in ELEMENTWISE_WORDS):
        return "elementwise"
    return "other"


@lru_cache(maxsize=512)
def _pointwise(op: str) -> bool:
    """Whether aten's ``op`` carries torch's ``pointwise`` tag (add, exp, mul_, ...)."""
    import torch

    try:
        packet = getattr(torch.ops.aten, op)
        overloads = [getattr(packet, o) for o in packet.overloads()]
    except (AttributeError, RuntimeError):  # not an aten op
        return False
    return any(torch.Tag.pointwise in getattr(o, "tags", ()) for o in overloads)
