"""In-house Triton kernel: smoothed linear cross-entropy without N×V logits.

Stages, one file each, read top-down: ``configs`` (pinned tiles, autotune switch),
``common`` (jit helpers), ``reductions`` (column sums), ``forward`` (LSE / target /
smoothing), ``sorting`` (vocab order), ``backward`` (dE/dC), ``function``
(autograd), ``api`` (public function and module).
"""

from .api import LinearCrossEntropy, linear_cross_entropy

__all__ = ["LinearCrossEntropy", "linear_cross_entropy"]
