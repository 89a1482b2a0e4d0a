"""Benchmark history: the series of each cell over many runs, which ``perfsuite compare``
cannot see from two files. Every results file goes into one SQLite database (``store``,
filled by ``ingest``); ``changepoints`` cuts each series, ``rules`` says which changes are
regressions, ``sensitivity`` measures the detector, ``timelines`` arranges the dashboard's
plots, ``demo`` writes a synthetic history and ``cli`` is ``perfsuite history``."""
