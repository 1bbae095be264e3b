"""The cache manifest (`<cache_root>/<replica>/rocmseat-manifest.json`, schema
`rocmseat.cache-manifest/v1`) as a strict model: what decides whether a compiler cache is reused
or moved aside (docs/cache.md, "The store"), so a damaged or edited one is "no valid manifest"
(unkeyed: moved aside, never reused) with one located line, never a KeyError in the store.

`key` and `factors` are what the store judges; the rest are what `cache audit` shows. Manifests
of older rocmseat versions carry only `key` and `factors` (and maybe not the schema): those
keys alone are a manifest. Factors are any JSON (the seat's own values) of bounded depth with
finite numbers.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from rocmseat.docmodel import JsonTree, Line, StrictDoc, UtcStamp

MANIFEST_SCHEMA = "rocmseat.cache-manifest/v1"
MAX_NAME = 255  # a file name
MAX_WHY = 1 << 16


class ReplacedDoc(StrictDoc):
    """The cache this one replaced: its moved-aside name and why it was moved."""

    moved_to: Annotated[Line, Field(min_length=1, max_length=MAX_NAME)]
    why: Annotated[str, Field(max_length=MAX_WHY)]


class ManifestDoc(StrictDoc):
    schema_: Literal["rocmseat.cache-manifest/v1"] | None = Field(None, alias="schema")
    key: Annotated[Line, Field(min_length=1, max_length=MAX_NAME)]
    factors: dict[Annotated[str, Field(max_length=MAX_NAME)], JsonTree]
    created: UtcStamp | None = None
    rocmseat_version: Annotated[Line, Field(max_length=100)] | None = None
    seat: Annotated[Line, Field(max_length=MAX_NAME)] | None = None
    replica: Annotated[Line, Field(max_length=MAX_NAME)] | None = None
    replaced: ReplacedDoc | None = None

    def as_dict(self) -> dict[str, Any]:
        """The manifest as written (keys the file had), for the store's and audit's readers."""
        return self.model_dump(by_alias=True, exclude_unset=True)
