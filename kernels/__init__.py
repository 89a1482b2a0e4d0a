"""In-house Triton kernel: smoothed linear cross-entropy without N×V logits.

Stages, one file each, read top-down: ``configs`` (pinned tiles, autotune switch),
``common`` (jit helpers), ``reductions`` (column sums), ``targets`` (the target logit),
``forward`` (LSE / smoothing), ``native`` (the forward in torch ops: CPU without the
interpreter), ``sorting`` (vocab order), ``tiles`` (which backward tiles to launch),
``backward`` (the tile backward, dE/dC), ``slices`` (the default backward), ``routes``
(which route runs the slices on a GPU), ``cublas_route`` (the slices' GEMMs in cuBLAS),
``terms`` (loss terms and backward coefficients), ``checks`` (input values), ``function``
(autograd), ``op`` (the custom ops torch.compile sees), ``parallel`` (vocab-parallel
over torch.distributed), ``api`` (public function and module), ``ablations`` (the tile
backward's entry point), ``patch`` (one-line adoption by a transformers causal LM).
"""

from .api import LinearCrossEntropy, linear_cross_entropy
from .parallel import VocabParallel
from .patch import patch, unpatch

__all__ = ["LinearCrossEntropy", "VocabParallel", "linear_cross_entropy", "patch", "unpatch"]
