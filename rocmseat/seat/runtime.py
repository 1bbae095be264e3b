"""The engine's runtime: on the host, or in a Podman or Docker container of an image named by
digest (`[engine] runtime`, `[engine] image`; docs/launch.md, "Containers").

Pure: the image reference is parsed here, once, for the seat model, the config key (the digest
is a factor: the engine's versions are those inside that image) and the container command.
"""

from __future__ import annotations

import re
from typing import Protocol

RUNTIMES = ("host", "podman", "docker")
CONTAINER_RUNTIMES = frozenset({"podman", "docker"})

# <name>@sha256:<64 hex>: a tag moves, a digest names the bytes (OCI image-spec descriptor
# digests; the distribution reference grammar allows name[:tag]@digest, the tag then ignored)
_IMAGE = re.compile(
    r"(?P<name>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"@(?P<digest>sha256:[0-9a-f]{64})")


def parse_image(value: str) -> tuple[str, str]:
    """(name, digest) of `<name>@sha256:<64 hex>`; ValueError naming what is wrong (a tag, no
    digest, a short digest) otherwise."""
    match = _IMAGE.fullmatch(value)
    if match is not None:
        return match.group("name"), match.group("digest")
    if "@" not in value:
        raise ValueError(
            f"image {value!r} has no digest: a tag is refused (it moves, and the config key "
            "would not see the engine change); give '<name>@sha256:<64 hex>' "
            "(`podman image inspect --format '{{.Digest}}' NAME:TAG` prints it)")
    raise ValueError(f"image {value!r} is not '<name>@sha256:<64 hex>' (a lowercase name, "
                     "no tag, the full sha256 digest)")


def image_digest(image: str | None) -> str | None:
    return None if image is None else parse_image(image)[1]


class EngineRuntime(Protocol):
    """What probe_prefix reads of a seat's `[engine]` (rocmseat.seat.model.Engine): a protocol,
    so that the model may import this module and not the other way round."""

    @property
    def runtime(self) -> str: ...
    @property
    def image(self) -> str | None: ...
    @property
    def python(self) -> object: ...


def probe_prefix(engine: EngineRuntime) -> tuple[str, ...]:
    """The runtime's argv up to the image, for running the engine's Python inside it (its
    versions are the config key's): none on the host. No network, removed when done."""
    if engine.runtime == "host" or engine.image is None:
        return ()
    return (engine.runtime, "run", "--rm", "--network=none",
            f"--entrypoint={engine.python}", engine.image)
