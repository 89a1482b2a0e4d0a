"""Plan: from what was asked to the cells to measure, and the memory model of what fits."""
