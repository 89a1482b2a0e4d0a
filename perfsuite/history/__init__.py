"""Benchmark history: every results file in one SQLite database, and the regressions in it.

``perfsuite.history`` keeps what ``perfsuite compare`` cannot see from two files:
the series of each cell over many runs. Stages, one module each:

``store``          the SQLite schema, connections, queries (stdlib ``sqlite3``)
``ingest``         results files -> runs and cells (validated, idempotent, one
                   transaction per file)
``changepoints``   change points of one series (``ruptures``' PELT)
``rules``          which change points are regressions (size, noise, persistence,
                   direction) and the ``check`` verdicts
``sensitivity``    the detector's detection and false-alarm rates on synthetic
                   series built from stored samples
``timelines``      each shape's plots for the dashboard: runs, lines, marked change points
``demo``           a synthetic history with a known step (``history demo``)
``cli``            ``python -m perfsuite.history add|import|list|check|ack|sensitivity|demo``

The database lives at ``.perfsuite/history.sqlite`` (relative to the working
directory) unless ``--db PATH`` or ``$PERFSUITE_HISTORY_DB`` says otherwise.
"""
