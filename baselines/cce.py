"""Cut Cross-Entropy (Apple, ``cut_cross_entropy``) and its two ablations. 25.1.1 has no
switch for ``cce-no-sort``, so it is assembled from CCE's kernels as ``cut_cross_entropy.cce``
does. Across ranks: ``VocabParallelOptions``, any [start, stop) per rank; not yet run on a GPU."""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
from typing import Any

import torch

from perfsuite import method as _method
from perfsuite.method import DTYPES, Case, Holds, LossFn, SimpleMethod, Unavailable, Unsupported

CPU_REASON = (
    "needs CUDA: CCE's Triton kernels do not run under the Triton interpreter "
    "(its LSE kernel's libdevice.log1p fails there)"
)
NO_VP_REASON = (
    "cut-cross-entropy {version} has no VocabParallelOptions: vocabulary parallelism is "
    "on apple/ml-cross-entropy's main (2025-04, #38), not in any PyPI release up to 25.1.1"
)


def _vp_check(device: str) -> str | None:
    """Why not, when the installed CCE's file list (read without importing it) has no
    ``cut_cross_entropy/vocab_parallel``; None when it has, or that is unknown."""
    try:
        files = importlib.metadata.files("cut-cross-entropy")
    except importlib.metadata.PackageNotFoundError:
        return None
    if files is None or any("cut_cross_entropy/vocab_parallel" in str(f) for f in files):
        return None
    return NO_VP_REASON.format(version=_method.package_version("cut-cross-entropy"))


def _build_tp(case: Case, c_shard: torch.Tensor, shard: Any) -> LossFn:
    cce = _method.imported("cut_cross_entropy")
    if not hasattr(cce, "VocabParallelOptions"):
        raise Unavailable(NO_VP_REASON.format(version=getattr(cce, "__version__", "?")))
    utils = _method.imported("cut_cross_entropy.utils")
    # CCE's backward takes fp32 inputs on its main, with triton >= 3.2.
    fp32 = getattr(utils, "is_triton_greater_or_equal_3_2_0", None)
    if case.dtype == "fp32" and not (fp32 is not None and fp32()):
        raise Unsupported("this CCE's backward takes bf16/fp16 only (fp32 needs triton >= 3.2)")
    parallel = cce.VocabParallelOptions(shard.start, shard.stop, group=shard.group)
    if not case.z_loss:
        return _build(case, c_shard, vocab_parallel_options=parallel)
    z_loss_fn = getattr(utils, "compute_z_loss", None)
    returns_lse = "return_lse" in inspect.signature(cce.linear_cross_entropy).parameters
    if z_loss_fn is None or not returns_lse:
        raise Unsupported("this CCE returns no differentiable LSE for z-loss")
    with_lse = _build(case, c_shard, vocab_parallel_options=parallel, return_lse=True)

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss, lse = with_lse(e, c, targets)
        z = z_loss_fn(lse, targets, ignore_index=case.ignore_index, reduction="mean")
        return loss + case.z_loss * z

    return loss_fn


def _build(case: Case, c: torch.Tensor, **options: Any) -> LossFn:
    """``cce.linear_cross_entropy(impl="cce")`` with ``options`` over its defaults."""
    loss = _method.imported("cut_cross_entropy", "linear_cross_entropy")
    return functools.partial(
        loss, ignore_index=case.ignore_index, softcap=case.softcap, impl="cce", **options
    )


@functools.cache
def _no_sort_function() -> tuple[type, Any, Any]:
    """An autograd Function like ``cut_cross_entropy.cce.LinearCrossEntropyFunction``
    (mean reduction, no shift), with the vocabulary sort left out."""
    _method.imported("cut_cross_entropy")
    try:
        from cut_cross_entropy.cce_backward import cce_backward_kernel
        from cut_cross_entropy.cce_lse_forward import cce_lse_forward_kernel
        from cut_cross_entropy.indexed_dot import indexed_neg_dot_forward_kernel
        from cut_cross_entropy.linear_cross_entropy import linear_cross_entropy
        from cut_cross_entropy.utils import _build_flat_valids, _handle_eps
    except ImportError as err:
        raise Unavailable(
            f"this cut_cross_entropy lacks the kernels cce-no-sort uses: {err}"
        ) from err
    for fn, names in {
        cce_lse_forward_kernel: "e c valids softcap return_logit_avg",
        cce_backward_kernel: "do e c lse valids softcap filter_eps targets shift vocab_ordering "
        "grad_scale",
        indexed_neg_dot_forward_kernel: "e c inds shift valids softcap out_dtype",
    }.items():
        _method.check_signature(fn, names, "cce-no-sort was written against (25.1.1)")
    default_eps = inspect.signature(linear_cross_entropy).parameters["filter_eps"].default

    class NoSortCCE(torch.autograd.Function):
        @staticmethod
        def forward(ctx, e, c, targets, valids, softcap, filter_eps):  # type: ignore[override]
            lse = cce_lse_forward_kernel(e, c, valids, softcap=softcap, return_logit_avg=False)
            neg_dot = indexed_neg_dot_forward_kernel(
                e, c, targets, False, valids, softcap, lse.dtype
            )
            loss = neg_dot.add_(lse).mean()
            ctx.save_for_backward(e, c, lse, targets, valids)
            ctx.softcap, ctx.filter_eps = softcap, filter_eps
            return loss

        @staticmethod
        def backward(ctx, grad_out):  # type: ignore[override]
            e, c, lse, targets, valids = ctx.saved_tensors
            de, dc = cce_backward_kernel(
                grad_out, e, c, lse, valids, ctx.softcap, ctx.filter_eps, targets=targets,
                shift=False, vocab_ordering=None, grad_scale=1 / lse.numel(),
            )  # fmt: skip
            return de, dc, None, None, None, None

    return NoSortCCE, _build_flat_valids, functools.partial(_handle_eps, default_eps)


def _build_no_sort(case: Case, c: torch.Tensor) -> LossFn:
    fn, build_valids, handle_eps = _no_sort_function()
    filter_eps = handle_eps(case.torch_dtype)
    if filter_eps is None:
        raise Unavailable("this cut_cross_entropy's default filter_eps is None: nothing to ablate")

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # As cce_linear_cross_entropy prepares them (2-D e, flat targets).
        e, targets = e.contiguous(), targets.contiguous()
        valids = build_valids(targets, case.ignore_index, False)
        return fn.apply(e, c, targets, valids, case.softcap, filter_eps)

    return loss_fn


def _patch(model: torch.nn.Module, preset: Any, beta: float):
    cce_patch = _method.imported("cut_cross_entropy.transformers", "cce_patch")
    model = cce_patch(model, impl="cce", reduction="mean")
    return lambda ids: model(input_ids=ids, labels=ids).loss


_COMMON: dict[str, Any] = dict(
    caps=_method.Capabilities(
        softcap=True,
        devices=frozenset({"cuda"}),
        cpu_reason=CPU_REASON,
        # cce_backward_kernel asserts bf16/fp16 embeddings.
        dtypes=frozenset({"bf16", "fp16"}),
        triton=True,
        holds=Holds("none"),
    ),
    requires=("cut_cross_entropy",),
    distributions=("cut-cross-entropy",),
    pip=("cut-cross-entropy==25.1.1",),
)

METHODS = [
    SimpleMethod(
        name="cce",
        description="Cut Cross-Entropy linear_cross_entropy(impl='cce'), defaults: "
        "filter_eps='high' (eps/32) gradient filter + vocab sort (no label smoothing)",
        build=_build,
        paper="cce",
        tp=_method.AcrossRanks(
            _build_tp,
            "Cut Cross-Entropy linear_cross_entropy with VocabParallelOptions (LSE and target "
            "logit all-reduced; filtered backward, fp32 dE all-reduce)",
            # Its z-loss from the returned LSE; fp32 refused in build where its triton is too old.
            caps=dict(z_loss=True, dtypes=frozenset(DTYPES)),
            extra_check=_vp_check,
            limits={
                "label_smoothing": "CCE computes plain cross-entropy (no label_smoothing argument)",
                "class_weights": "CCE's linear_cross_entropy takes no class weights",
            },
        ),
        step=_method.StepPatch(_patch, requires=("cut_cross_entropy.transformers",)),
        **_COMMON,
    ),
    SimpleMethod(
        name="cce-no-sort",
        timed_by_default=False,  # an ablation of CCE's filter and sort, by name
        description="CCE with the gradient filter but no vocab sort (CCE's kernels, "
        "vocab_ordering=None; 25.1.1 has no public flag)",
        build=_build_no_sort,
        paper="cce_no_vocab_sorting",
        **_COMMON,
    ),
    SimpleMethod(
        name="cce-no-filter",
        timed_by_default=False,  # an ablation of CCE's filter and sort, by name
        description="CCE linear_cross_entropy(impl='cce', filter_eps=None): no gradient "
        "filter (and so no vocab sort)",
        build=functools.partial(_build, filter_eps=None),
        paper="cce_no_grad_filter",
        **_COMMON,
    ),
]
