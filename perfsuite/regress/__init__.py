"""Regress: regression verdicts between results documents, the stored
baselines they are judged against, and the detector's measured sensitivity."""
