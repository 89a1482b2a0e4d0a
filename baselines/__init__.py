"""Method adapters: every way of computing the loss that the suite measures, ours included."""
