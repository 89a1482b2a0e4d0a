"""Trained activations as a workload: dumps from ``transformers`` causal LMs."""
