"""perfsuite: smoothed linear cross-entropy that never materialises the logits
(``perfsuite.kernels``), and the suite that measures it against its peers (``.baselines``)."""

__version__ = "0.1.0"

from perfsuite.checkout import drop_checkout_root

drop_checkout_root()  # its kernels/ would shadow Hugging Face's `kernels` (see checkout.py)
