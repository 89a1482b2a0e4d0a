"""The in-house Triton kernel (``perfsuite.kernels``) in its benchmarked variants; plain
``ours`` also in a model's step (``kernels.patch``) and across ranks (``vocab_parallel``:
kernels/parallel.py), with every term there too (class weights: this shard's slice)."""

from __future__ import annotations

import functools
from typing import Any

import torch

from perfsuite import method as _method
from perfsuite.method import AcrossRanks, Capabilities, Case, Holds, LossFn, LossTerms, SimpleMethod


def _build(case: Case, c: torch.Tensor, tiles: bool = False, **options: Any) -> LossFn:
    # Imported here: the registry must load without triton installed.
    from perfsuite.kernels import linear_cross_entropy
    from perfsuite.kernels.ablations import tiled_linear_cross_entropy

    weight = _method.class_weights(case, c.device)
    chosen = dict(label_smoothing=case.beta, softcap=case.softcap, weight=weight, **options)
    if not tiles and "engine" not in chosen:
        # The slice backward runs natively on CPU (torch engine), whatever the
        # process's TRITON_INTERPRET says; on a GPU the route kernels/routes.py's
        # rule picks for the arch and dtype ("auto").
        chosen["engine"] = "torch" if case.device == "cpu" else "auto"
    if case.z_loss:
        chosen["z_loss"] = case.z_loss
    loss = tiled_linear_cross_entropy if tiles else linear_cross_entropy
    return functools.partial(loss, ignore_index=case.ignore_index, **chosen)


def _patch(model: torch.nn.Module, preset: object, beta: float):
    from perfsuite.kernels import patch

    patch(model, label_smoothing=beta)  # softcap: the config's (Gemma2's 30)
    return lambda ids: model(input_ids=ids, labels=ids).loss


def _build_tp(case: Case, c_shard: torch.Tensor, shard: Any) -> LossFn:
    from perfsuite.kernels import VocabParallel, linear_cross_entropy

    layout = VocabParallel(shard.start, shard.stop, group=shard.group, vocab_size=shard.vocab)
    # As on one device: the slice backward natively on CPU, the Triton kernel on a GPU.
    engine = "torch" if case.device == "cpu" else "triton"
    weight = _method.class_weights(case, c_shard.device)
    if weight is not None:
        weight = weight[shard.start : shard.stop].contiguous()

    return functools.partial(
        linear_cross_entropy, label_smoothing=case.beta, softcap=case.softcap,
        ignore_index=case.ignore_index, weight=weight, z_loss=case.z_loss,
        vocab_parallel=layout, engine=engine,
    )  # fmt: skip


_TP = AcrossRanks(
    _build_tp,
    "our kernel with vocab_parallel: per-row statistics all-reduced, exact slice backward, "
    "fp32 dE summed across ranks",
)
_KINDS = dict(tp=_TP, step=_method.StepPatch(_patch, requires=("perfsuite.kernels.patch",)))
# PaLM's coefficient, and the variants' fixed training terms (method.LossTerms).
Z_LOSS = 1e-4
_TERMS = {"ours-zloss": LossTerms(z_loss=Z_LOSS), "ours-weighted": LossTerms(class_weights=True)}
# The paper's names of the variants it measured (render/paper_compare.py).
_PAPER = {"ours": "ours", "ours-fused": "ours_fused", "ours-tiles": "ours_no_grad_filter",
          "ours-tiles-no-sort": "ours_no_vocab_sorting"}  # fmt: skip
_TILES = {"tiles": True}
_FILTER = {**_TILES, "filter_eps": "auto"}
# name -> (description, options). Each route of the slice algorithm forced
# (kernels/routes.py) keeps measurable whichever one the rule does not pick for ours.
_VARIANTS = {
    "ours": ("exact slice backward: fused gradient slices, plain GEMMs", {}),
    "ours-fused": ("slice backward run inside the forward call", {"impl": "fused"}),
    "ours-zloss": (f"ours with z-loss {Z_LOSS:g}·lse² (its cost over plain)", {}),
    "ours-weighted": ("ours with class weights (its cost over plain)", {}),
    # On a CPU it is ours itself: CUDA only.
    "ours-cublas": ("design probe: ours-route-cublas with its epilogues in torch ops "
                    "(engine torch)", {"engine": "torch"}),
    "ours-route-triton": ("route ablation: Triton GEMMs with the softmax fused in "
                          "(forward, gradient slices)", {"engine": "triton"}),
    "ours-route-cublas": ("route ablation: cuBLAS fp32 logit slices, "
                          "one Triton epilogue per slice", {"engine": "cublas"}),
    "ours-tiles": ("ablation: atomic-tile backward, no filtering (exact)", _TILES),
    "ours-tiles-list": ("ablation: atomic tiles, filtered over the mass-budget tile list", _FILTER),
    "ours-tiles-sort": ("ablation: atomic tiles, CCE-style element filter, vocab sorting",
                        {**_FILTER, "tile_list": False}),
    "ours-tiles-no-sort": ("ablation: atomic tiles, element filter without sorting",
                           {**_FILTER, "tile_list": False, "sort_vocab": False}),
}  # fmt: skip


def _caps(name: str, options: dict[str, Any]) -> Capabilities:
    tiles = bool(options.get("tiles"))
    return Capabilities(
        devices=frozenset({"cuda"} if name == "ours-cublas" else {"cpu", "cuda"}),
        label_smoothing=True,
        softcap=True,
        # The slice backward's per-row coefficients carry them; the tile ablation does not.
        z_loss=not tiles,
        class_weights=not tiles,
        # The slice backward runs natively on CPU (engine="torch"); the routes forced to
        # Triton kernels and the tile backward are Triton (under the interpreter on a CPU).
        triton=tiles or options.get("engine") in ("triton", "cublas"),
        holds=Holds("none"),
        grads_in_forward=options.get("impl") == "fused",
    )


METHODS = [
    SimpleMethod(
        name=name,
        description=description,
        build=functools.partial(_build, **options),
        caps=_caps(name, options),
        requires=("triton",),
        terms=_TERMS.get(name),
        paper=_PAPER.get(name),
        # The paper's table has one row of ours; every variant is an ablation, by name.
        timed_by_default=name == "ours",
        **(_KINDS if name == "ours" else {}),
    )
    for name, (description, options) in _VARIANTS.items()
]
