"""Render: results documents as tables, reports, plots and the paper's ratios;
reads results, never measures."""
