"""rocmseat: make the silent failures of vLLM seats on AMD ROCm nodes loud."""

from __future__ import annotations

__version__ = "0.1.0"
