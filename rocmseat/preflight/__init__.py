"""Preflight: pure judges from readings (inventory, firmware link, AER/RAS counters over fixed
windows) to findings, the recorded verdict (`verdict`), and the report renderers."""
