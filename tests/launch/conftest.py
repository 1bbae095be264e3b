"""Fixtures of the launch tests: the fake libamdhip64 of the hip tests (built once per session by
tests/hip/conftest.py) for the launches that number GPUs through HIP."""

from __future__ import annotations

from tests.hip.conftest import fake_hip, shm_prefix

__all__ = ["fake_hip", "shm_prefix"]
