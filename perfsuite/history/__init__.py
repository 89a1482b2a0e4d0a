"""Benchmark history: every results file in one SQLite database, each cell's series cut
into change points, and the rule that says which are regressions (docs/history.md)."""
