"""Remediation: the ladder and its bounds (policy), the record (journal), the edge (actions,
service). docs/remediate.md."""
