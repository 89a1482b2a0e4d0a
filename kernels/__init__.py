"""In-house Triton kernel: smoothed linear cross-entropy without N×V logits (docs/kernel.md).

Each module imports only those before it here (but for two lazy imports): configs, common,
terms; reductions, targets, hopper, forward; slices, cublas_route, native, routes (the
default backward); tiles, backward (the tile ablation); checks, function, op, parallel,
api, ablations, patch (the entry points).
"""

from .api import LinearCrossEntropy, linear_cross_entropy
from .parallel import VocabParallel
from .patch import patch, unpatch

__all__ = ["LinearCrossEntropy", "VocabParallel", "linear_cross_entropy", "patch", "unpatch"]
