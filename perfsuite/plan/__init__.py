"""Plan: from what was asked (shapes, methods, workload) to the cells to measure,
with the analytic memory model that decides what can fit."""
