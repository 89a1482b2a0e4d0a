"""Benchmark history in SQLite: change points and regressions across runs (docs/history.md)."""
