"""Preflight: pure judges from an inventory to findings, and the report renderers."""
