"""The draft-length advisor: per-position acceptance, step-cost fit, the staircase of K per
batch-size band and the seat edit that writes it (docs/spec.md)."""
