"""Measurement primitives: timers and memory meters, one module each."""
