"""The engines behind one seam (docs/engines.md): vLLM, SGLang, llama.cpp.

`by_kind(kind)` is how every room gets the engine of a seat (`[engine] kind`, vllm by default);
`by_prefix` and `PAGES` let the metrics reader tell an engine's page by its series' prefix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from rocmseat.engines import llamacpp, sglang, vllm
from rocmseat.engines.base import KINDS, Engine, PageSpec

if TYPE_CHECKING:
    from rocmseat.seat.model import Seat

ENGINES: Final[dict[str, Engine]] = {
    "vllm": vllm.ENGINE,
    "sglang": sglang.ENGINE,
    "llamacpp": llamacpp.ENGINE,
}
PAGES: Final[tuple[PageSpec, ...]] = tuple(engine.page for engine in ENGINES.values())


def by_kind(kind: str) -> Engine:
    """The engine of a seat's `[engine] kind` (the seat schema admits only KINDS)."""
    try:
        return ENGINES[kind]
    except KeyError:
        raise ValueError(f"unknown engine kind {kind!r} (known: {', '.join(KINDS)})") from None


def seat_engine(seat: Seat) -> Engine:
    """The engine of a seat (its `[engine] kind`)."""
    return by_kind(seat.engine.kind)


__all__ = ["ENGINES", "KINDS", "PAGES", "Engine", "by_kind", "seat_engine"]
