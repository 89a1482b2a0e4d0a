"""Results: the document (schema, atomic writes), its provenance, and merging several."""
