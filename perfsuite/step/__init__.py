"""``perfsuite step``: one full training step of a transformers causal LM per loss method
(forward, backward, AdamW), gated against eager in fp32 (docs/step.md)."""
