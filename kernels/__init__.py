"""In-house Triton kernel: smoothed linear cross-entropy without N×V logits (docs/kernel.md).

Files, each importing only those above it (but for two lazy imports):
- shared: ``configs`` (pinned tiles, autotune switch), ``common`` (jit helpers), ``terms``
  (loss terms and backward coefficients);
- forward: ``reductions`` (column sums), ``targets`` (the target logit), ``hopper`` (the
  TMA kernels of the forward and the gradient slice on sm_90/sm_100), ``forward``;
- default backward: ``slices`` (exact gradient slices, plain GEMMs), ``cublas_route``
  (the same with cuBLAS logit slices, and its forward), ``native`` (the forward in torch
  ops: CPU without the interpreter), ``routes`` (which route runs on a GPU);
- tile ablation: ``tiles`` (which tiles to launch), ``backward`` (the atomic-tile backward);
- entry points: ``checks`` (value checks), ``function`` (autograd), ``op`` (the custom ops
  torch.compile sees), ``parallel`` (vocab-parallel), ``api`` (public function and
  module), ``ablations`` (the tile backward's), ``patch`` (transformers causal LMs).
"""

from .api import LinearCrossEntropy, linear_cross_entropy
from .parallel import VocabParallel
from .patch import patch, unpatch

__all__ = ["LinearCrossEntropy", "VocabParallel", "linear_cross_entropy", "patch", "unpatch"]
