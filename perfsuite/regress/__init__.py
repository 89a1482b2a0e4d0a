"""Regression verdicts, the stored baselines they judge against, the detector's sensitivity."""
