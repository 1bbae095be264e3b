"""The cache store's documents: the manifest and the move intent.

The cache manifest (`<cache_root>/<replica>/rocmseat-manifest.json`, schema
`rocmseat.cache-manifest/v1`) as a strict model: what decides whether a compiler cache is reused
or moved aside (docs/cache.md, "The store"), so a damaged or edited one is "no valid manifest"
(unkeyed: moved aside, never reused) with one located line, never a KeyError in the store.

`key` and `factors` are what the store judges; the rest are what `cache audit` shows. Manifests
of older rocmseat versions carry only `key` and `factors` (and maybe not the schema): those
keys alone are a manifest. Factors are any JSON (the seat's own values) of bounded depth with
finite numbers.

The move intent (`<cache_root>/.<replica>.intent.json`, schema `rocmseat.cache-move-intent/v1`):
the move aside in progress, written before the first rename and read back after a kill to finish
it (rocmseat.cache.store). It names the directory a cache is renamed to, so it is a strict model:
a damaged or forged one is one located line and is dropped (the live cache is judged afresh),
never a KeyError or a rename to a name the store did not choose. Intents of older rocmseat
versions carry no schema: the same keys.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from rocmseat.docmodel import JsonTree, Line, StrictDoc, UtcStamp, refuse

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


INTENT_SCHEMA = "rocmseat.cache-move-intent/v1"
MAX_CHANGES = 10_000  # a key has tens of factors


def _change(value: list[Any]) -> list[Any]:
    """[factor, old, new, words]: a name and its words are text, the values any JSON."""
    if not (isinstance(value[0], str) and 0 < len(value[0]) <= MAX_NAME):
        raise refuse("expected [factor name, old, new, words]: the factor is not a name")
    if not (isinstance(value[3], str) and len(value[3]) <= MAX_WHY):
        raise refuse("expected [factor name, old, new, words]: the words are not a text")
    return value


Change = Annotated[list[JsonTree], Field(min_length=4, max_length=4), AfterValidator(_change)]


class IntentDoc(StrictDoc):
    """The move aside in progress: where the live cache goes, why, and the key it is for."""

    schema_: Literal["rocmseat.cache-move-intent/v1"] | None = Field(None, alias="schema")
    action: Literal["move-aside"]
    state_before: Literal["stale", "unkeyed"]
    moved_to: Annotated[Line, Field(min_length=1, max_length=MAX_NAME)]
    new_key: Annotated[Line, Field(min_length=1, max_length=MAX_NAME)]
    changed: Annotated[list[Change], Field(max_length=MAX_CHANGES)]
