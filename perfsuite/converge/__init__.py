"""``perfsuite converge``: does swapping the loss change what the model learns?

The benchmark rows say a method computes the same loss and gradients as eager on
one random case. Training compounds errors step after step, so this stage trains
the same tiny causal LM (a randomly initialised ``transformers`` Llama) from the
same seed, on the same synthetic data in the same order, once per method x beta,
each method computing the loss from the last hidden states and the output
projection the way the libraries patch a model. It records per-step loss,
gradient norm, time and peak memory, then held-out loss, perplexity, accuracy
and calibration (ECE, RMS-CE, MCE, SCE, ACE, plus the distance to the known true
next-token distribution), and a parity verdict against eager in the same dtype.

Modules, one job each: ``presets`` (sizes), ``data`` (synthetic bigram source),
``text`` (bundled real text), ``datasets`` (which of the two), ``model`` (tiny
Llama + loss hook), ``train`` (the loop), ``calibration`` (metrics), ``evaluate``
(held-out pass), ``yardstick`` (eager's own rounding noise), ``parity``
(verdicts), ``worker`` (one method's runs in a fresh process), ``runner`` (the
workers, crashes and scheduling), ``report`` (JSON document + tables), ``plots``
(figures), ``sweep`` (the cells, what is written when), ``cli`` (arguments).
"""
