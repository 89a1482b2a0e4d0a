"""In-house Triton kernel: smoothed linear cross-entropy without N×V logits.

Stages, one file each, read top-down: ``configs`` (pinned tiles, autotune switch),
``common`` (jit helpers), ``reductions`` (column sums), ``forward`` (LSE / target /
smoothing), ``sorting`` (vocab order), ``backward`` (dE/dC), ``slices``
(the default backward), ``terms`` (loss terms and backward coefficients), ``function``
(autograd), ``parallel`` (vocab-parallel over torch.distributed), ``api`` (public
function and module), ``ablations`` (the tile backward's entry point), ``patch``
(one-line adoption by a transformers causal LM).
"""

from .api import LinearCrossEntropy, linear_cross_entropy
from .parallel import VocabParallel
from .patch import patch, unpatch

__all__ = ["LinearCrossEntropy", "VocabParallel", "linear_cross_entropy", "patch", "unpatch"]
