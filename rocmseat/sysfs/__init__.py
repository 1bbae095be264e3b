"""Readers of /sys behind an injectable root, and pure parsers (text -> value)."""
