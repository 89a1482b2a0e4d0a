"""The in-house Triton kernel (``perfsuite.kernels``) in its benchmarked variants."""

from __future__ import annotations

from typing import Any

import torch

from perfsuite.method import Capabilities, Case, LossFn, SimpleMethod


def _builder(**options: Any):
    def build(case: Case, c: torch.Tensor) -> LossFn:
        # Imported here: the registry must load without triton installed.
        from perfsuite.kernels import linear_cross_entropy

        def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return linear_cross_entropy(
                e,
                c,
                targets,
                label_smoothing=case.beta,
                softcap=case.softcap,
                ignore_index=case.ignore_index,
                **options,
            )

        return loss_fn

    return build


def _caps(fused: bool) -> Capabilities:
    return Capabilities(
        label_smoothing=True,
        softcap=True,
        triton=True,
        materializes_logits=False,
        grads_in_forward=fused,
    )


_VARIANTS = (
    ("ours", "split forward/backward, gradient filtering over the tile list", {}, False),
    (
        "ours-sort",
        "split, filtering with CCE-style vocab sorting, no tile list",
        {"tile_list": False},
        False,
    ),
    (
        "ours-no-sort",
        "split, filtering without tile list or sorting",
        {"tile_list": False, "sort_vocab": False},
        False,
    ),
    ("ours-no-filter", "split, no gradient filtering (exact)", {"filter_eps": None}, False),
    ("ours-fused", "gradients computed in the forward call, filtered", {"impl": "fused"}, True),
    (
        "ours-fused-no-filter",
        "gradients computed in the forward call, no filtering",
        {"impl": "fused", "filter_eps": None},
        True,
    ),
)

METHODS = [
    SimpleMethod(
        name=name,
        description=description,
        build=_builder(**options),
        caps=_caps(fused),
        requires=("triton",),
        distributions=("triton", "torch"),
    )
    for name, description, options, fused in _VARIANTS
]
