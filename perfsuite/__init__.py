"""perfsuite: smoothed linear cross-entropy that never materialises the logits
(``perfsuite.kernels``), and the benchmark suite that measures it against its
peers (``perfsuite.baselines``)."""

__version__ = "0.1.0"
