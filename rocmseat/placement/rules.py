"""The seat's own placement rules: what a seat file alone says of replica i (docs/launch.md,
"Placement"). Pure and small: it imports the seat room only, none of the node, HIP or preflight
rooms.

One rule per fact: a replica's name back to its index (the name and the port themselves,
`[replicas] names[i]` else `r<i>` and `serve.port_base + i`, are rocmseat.seat.naming's, which
the seat loader checks a file by), its port past 65535 located, its cache dir
(`<cache_root>/<name>`), its state dir (`<state dir>/seats/<seat>/<name>`), the host a client
connects to, and the one parser of a `--pair` option (two different PCI addresses, sorted).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from rocmseat.errors import ConfigError
from rocmseat.located import located_error
from rocmseat.seat.naming import planned_port, replica_name
from rocmseat.statedir import StateDir
from rocmseat.sysfs.parse import normalize_pci_address
from rocmseat.text import printable
from rocmseat.tomllocate import Loc

if TYPE_CHECKING:  # the schema (pydantic) is not imported by `--pair` parsing: preflight's start
    from rocmseat.seat.model import Seat

MAX_PORT = 65535
# `r<i>` in its one spelling (no leading zero); i below 100,000 (ports stop at 65535 anyway)
_DEFAULT_NAME = re.compile(r"r(0|[1-9][0-9]{0,4})")
_WILDCARD_HOSTS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def replica_index(seat: Seat, name: str) -> int | None:
    """The index a replica called `name` has in `seat` by the naming rule (`[replicas] names[i]`,
    else `r<i>`), or None when the seat can have no replica of that name: not in `names`, not
    `r<i>` in canonical spelling, past the seat's pairs (explicit) or its one replica (cpu), or
    past the last port. Whether the node has that many pairs is the resolver's question."""
    names = seat.replicas.names
    if names is not None:
        if name not in names:
            return None
        index = names.index(name)
    else:
        match = _DEFAULT_NAME.fullmatch(name)
        if match is None:
            return None
        index = int(match.group(1))
    if seat.backend == "cpu" and index != 0:
        return None
    if seat.replicas.mode == "explicit" and index >= len(seat.replicas.pairs or ()):
        return None
    if planned_port(seat, index) > MAX_PORT:
        return None
    return index


def known_names(seat: Seat) -> str:
    """The replica names a seat file alone tells, for a message ("r0, r1, ..." for auto)."""
    if seat.replicas.names is not None:
        return ", ".join(seat.replicas.names)
    return "r0" if seat.backend == "cpu" else "r0, r1, ..."


def replica_port(seat: Seat, index: int) -> int:
    """Replica i's port; past 65535 is the seat's error, located."""
    port = planned_port(seat, index)
    if port > MAX_PORT:
        raise located(seat, ("serve", "port_base"),
                      f"replica {replica_name(seat, index)} (index {index}) would listen on port "
                      f"{port}: {seat.serve.port_base} + {index} is past {MAX_PORT}",
                      hint="lower serve.port_base so every replica's port fits")
    return port


def seat_state_dir(state_root: Path, seat: str) -> Path:
    """`<state dir>/seats/<seat>`: one dir per replica below it."""
    return StateDir(state_root).seat(seat)


def replica_state_dir(state_root: Path, seat: str, replica: str) -> Path:
    """`<state dir>/seats/<seat>/<replica>`: startup reports, placement.json, the launch lock."""
    return StateDir(state_root).replica(seat, replica).path


def replica_cache_dir(seat: Seat, replica: str) -> Path:
    """`<cache_root>/<replica>`: the replica's live cache (docs/cache.md, "The store")."""
    return seat.cache_root / replica


def located(seat: Seat, loc: Loc, why: str, hint: str | None = None) -> ConfigError:
    """A ConfigError naming the seat file, the key's line and the key (from the text the seat
    was parsed from: no file is read again)."""
    return located_error(str(seat.source_path or seat.name), loc, why, text=seat.source_text,
                         hint=hint)


def probe_host(host: str) -> str:
    """The host a client connects to for `engine.host`: the loopback for a wildcard, else the
    host itself when it is an IP literal or a DNS name (the seat loader's rule,
    rocmseat.seat.model.is_host); ValueError for anything else: a URL built from it would point
    elsewhere ("127.0.0.1@evil.example/#")."""
    from rocmseat.seat.model import is_host

    connect = _WILDCARD_HOSTS.get(host, host)
    if not is_host(connect):
        raise ValueError(f"{host!r:.80} is not a host name or an IP address")
    return connect


def http_base(host: str, port: int) -> str:
    """`http://HOST:PORT` with an IPv6 literal in brackets (RFC 3986 section 3.2.2)."""
    connect = probe_host(host)
    if not 0 < port <= MAX_PORT:
        raise ValueError(f"port {port} is outside 1..{MAX_PORT}")
    shown = f"[{connect}]" if ":" in connect else connect
    return f"http://{shown}:{port}"


def parse_pair(text: str, option: str = "--pair") -> tuple[str, str]:
    """`09:00.0,05:00.0` -> ("0000:05:00.0", "0000:09:00.0"): two different PCI addresses
    (dddd:bb:dd.f or bb:dd.f), sorted, as every pair of the house is (rocmseat.preflight.pairs
    proposes them sorted); ConfigError naming the option otherwise."""
    parts = [p.strip() for p in text.split(",")]
    addresses = [normalize_pci_address(p) for p in parts]
    shown = printable(text, 80)
    if len(parts) != 2 or None in addresses:
        raise ConfigError(f"{option} {shown!r}: expected two PCI addresses A,B (0000:05:00.0 "
                          "or 05:00.0)")
    a, b = addresses[0] or "", addresses[1] or ""
    if a == b:
        raise ConfigError(f"{option} {shown!r}: a pair needs two different GPUs")
    return (min(a, b), max(a, b))


MAX_GROUP = 64


def parse_group(text: str, option: str = "--pair") -> tuple[str, ...]:
    """`--pair` of launch: a replica's GPUs, one for TP1, two for a pair, tp for a TP group
    (`A,B,C,D`): different PCI addresses, sorted; ConfigError naming the option otherwise."""
    parts = [p.strip() for p in text.split(",")]
    addresses = [normalize_pci_address(p) for p in parts]
    shown = printable(text, 80)
    if not 1 <= len(parts) <= MAX_GROUP or None in addresses:
        raise ConfigError(f"{option} {shown!r}: expected the replica's PCI addresses A,B,... "
                          "(0000:05:00.0 or 05:00.0)")
    group = sorted(a or "" for a in addresses)
    if len(set(group)) != len(group):
        raise ConfigError(f"{option} {shown!r}: " + ("a pair needs two different GPUs"
                                                     if len(group) == 2 else
                                                     "a TP group names a GPU twice"))
    return tuple(group)
