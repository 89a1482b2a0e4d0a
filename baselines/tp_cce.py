"""Cut Cross-Entropy's vocabulary parallelism: ``linear_cross_entropy(...,
vocab_parallel_options=VocabParallelOptions(start, stop, group))``, ``impl="cce"``.

The LSE and target logit are all-reduced in the forward; the backward writes this
shard's dC and sums dE in fp32; any [start, stop) per rank. Not yet run on a GPU here.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from typing import Any

import torch

from perfsuite import method as _method
from perfsuite.baselines.tp_torch import TPMethod
from perfsuite.method import Capabilities, Case, LossFn, Unavailable, Unsupported
from perfsuite.tp_method import Shard

CPU_REASON = (
    "needs CUDA: CCE's Triton kernels do not run under the Triton interpreter "
    "(its LSE kernel's libdevice.log1p fails there)"
)
NO_VP_REASON = (
    "cut-cross-entropy {version} has no VocabParallelOptions: vocabulary parallelism is "
    "on apple/ml-cross-entropy's main (2025-04, #38), not in any PyPI release up to 25.1.1"
)


def _vp_check(device: str) -> str | None:
    """Why not, when the installed CCE lacks ``cut_cross_entropy/vocab_parallel`` (read
    from the distribution's file list, without importing it); None when it has it or
    that is unknown."""
    try:
        files = importlib.metadata.files("cut-cross-entropy")
    except importlib.metadata.PackageNotFoundError:
        return None
    if files is None or any("cut_cross_entropy/vocab_parallel" in str(f) for f in files):
        return None
    return NO_VP_REASON.format(version=_method.package_version("cut-cross-entropy"))


def import_cce() -> Any:
    """``cut_cross_entropy``, or ``Unavailable`` saying why not (imported in ``build``)."""
    try:
        import cut_cross_entropy
    except ImportError as err:
        raise Unavailable(f"cut_cross_entropy failed to import: {err}") from err
    return cut_cross_entropy


def _fp32_backward() -> bool:
    """CCE's backward takes fp32 inputs (main, with triton >= 3.2)."""
    from cut_cross_entropy import utils

    check = getattr(utils, "is_triton_greater_or_equal_3_2_0", None)
    return bool(check is not None and check())


def _build(case: Case, c_shard: torch.Tensor, shard: Shard) -> LossFn:
    cce = import_cce()
    if not hasattr(cce, "VocabParallelOptions"):
        raise Unavailable(NO_VP_REASON.format(version=getattr(cce, "__version__", "?")))
    if case.dtype == "fp32" and not _fp32_backward():
        raise Unsupported("this CCE's backward takes bf16/fp16 only (fp32 needs triton >= 3.2)")
    z_loss_fn = None
    if case.z_loss:
        from cut_cross_entropy import utils

        z_loss_fn = getattr(utils, "compute_z_loss", None)
        if (
            z_loss_fn is None
            or "return_lse" not in inspect.signature(cce.linear_cross_entropy).parameters
        ):
            raise Unsupported("this CCE returns no differentiable LSE for z-loss")
    options = cce.VocabParallelOptions(shard.start, shard.stop, group=shard.group)

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        kwargs = dict(ignore_index=case.ignore_index, softcap=case.softcap, impl="cce")
        if z_loss_fn is None:
            return cce.linear_cross_entropy(e, c, targets, vocab_parallel_options=options, **kwargs)
        loss, lse = cce.linear_cross_entropy(
            e, c, targets, vocab_parallel_options=options, return_lse=True, **kwargs
        )
        z = z_loss_fn(lse, targets, ignore_index=case.ignore_index, reduction="mean")
        return loss + case.z_loss * z

    return loss_fn


TP_CCE = TPMethod(
    name="cce",
    description="Cut Cross-Entropy linear_cross_entropy with VocabParallelOptions "
    "(LSE and target logit all-reduced; filtered backward, fp32 dE all-reduce)",
    caps=Capabilities(
        softcap=True,
        z_loss=True,
        devices=frozenset({"cuda"}),
        cpu_reason=CPU_REASON,
        triton=True,
        materializes_logits=False,
    ),
    requires=("cut_cross_entropy",),
    distributions=("cut-cross-entropy", "triton", "torch"),
    build_tp=_build,
    extra_check=_vp_check,
    limits={
        "label_smoothing": "CCE computes plain cross-entropy (no label_smoothing argument)",
        "class_weights": "CCE's linear_cross_entropy takes no class weights",
    },
)
