"""Results: the results document (schema, atomic writes), its provenance, and
joining several of them (merge)."""
