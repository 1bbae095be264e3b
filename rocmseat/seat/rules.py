"""Rules over a whole seat document, and rules across keys of a validated seat (the per-key
rules live on the model, rocmseat.seat.model).

Pure: a TOML document or a validated Seat in, (key path, why) out; the loader adds the file and
line. `document_problems` runs before the schema: every string, key and number of the file,
known keys or not, is checked once here, so no later room meets a control character, a NaN, a
date or a value nested a thousand deep (docs/seat.md, "Hostile input").
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

from rocmseat.seat.model import METHODS_NEEDING_PATH, RESERVED_EXTRA_KEYS, Seat, check_listen
from rocmseat.seat.naming import RESERVED_REPLICA_NAMES, planned_port, replica_name
from rocmseat.text import control_char
from rocmseat.tomlio import MAX_NESTING

Location = tuple[str | int, ...]

# Limits of a seat document (docs/seat.md, "Hostile input").
MAX_ITEMS = 4096  # entries of one array or table
MAX_KEY_CHARS = 256
MAX_STRING_CHARS = 4096
# Engine arguments, environment values, [drafter] extra and the canary prompt may be longer;
# still below Linux's 128 KiB limit of one argv or environment string (MAX_ARG_STRLEN).
MAX_LONG_STRING_CHARS = 65536
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # TOML integers are 64-bit; tomllib reads any size
# The only strings where TAB and LF mean something: the canary prompt is a JSON string in the
# body of an HTTP request, never a unit line, an argv element, a variable or a path.
_MULTILINE: dict[Location, str] = {("readiness", "canary_prompt"): "\t\n"}
_LONG_PREFIXES: tuple[Location, ...] = (
    ("serve", "extra_args"), ("env",), ("drafter", "extra"), ("readiness", "canary_prompt"),
)


def document_problems(data: Mapping[str, Any]) -> list[tuple[Location, str]]:
    """The first value or key of a parsed seat document that no seat key may hold.

    Refused anywhere: control characters (C0 with TAB, LF and CR, DEL, C1, U+2028/U+2029; TAB
    and LF only in the canary prompt), non-finite floats, integers outside 64 bits, TOML dates
    and times (a [drafter] extra value must be JSON), nesting deeper than MAX_NESTING, more
    than MAX_ITEMS entries, over-long keys and strings. Iterative, in document order.
    """
    stack: list[tuple[Location, Any, int]] = [((), data, 0)]
    while stack:
        loc, value, depth = stack.pop()
        why = _value_problem(loc, value, depth)
        if why is not None:
            return [(loc, why)]
        children: list[tuple[Location, Any, int]] = []
        if isinstance(value, Mapping):
            for key, item in value.items():
                key_why = _key_problem(str(key))
                if key_why is not None:
                    return [((*loc, str(key)), key_why)]
                children.append(((*loc, str(key)), item, depth + 1))
        elif isinstance(value, list):
            children = [((*loc, index), item, depth + 1) for index, item in enumerate(value)]
        stack.extend(reversed(children))
    return []


def _value_problem(loc: Location, value: Any, depth: int) -> str | None:
    if depth > MAX_NESTING:
        return f"nested more than {MAX_NESTING} levels deep"
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        bad = control_char(value, _MULTILINE.get(loc, ""))
        if bad is not None:
            offset, name = bad
            allowed = " (TAB and LF are allowed here)" if loc in _MULTILINE else ""
            return (f"holds the control character {name} at offset {offset}: control "
                    f"characters are refused in seat strings{allowed}; a NUL, CR or LF would "
                    "end a line of a systemd unit")
        limit = MAX_LONG_STRING_CHARS if _is_long(loc) else MAX_STRING_CHARS
        if len(value) > limit:
            return f"is {len(value):,} characters long; the limit is {limit:,}"
        return None
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            return "is an integer outside the 64-bit range TOML allows"
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return f"{value} is not a finite number (nan and inf are refused)"
        return None
    if isinstance(value, dt.date | dt.time):  # datetime is a date
        return (f"is a TOML {type(value).__name__}: no seat key takes one ([drafter] extra "
                "holds JSON values only: strings, numbers, booleans, arrays and tables)")
    if isinstance(value, Mapping | list) and len(value) > MAX_ITEMS:
        return f"has {len(value):,} entries; the limit is {MAX_ITEMS:,}"
    return None


def _key_problem(key: str) -> str | None:
    bad = control_char(key)
    if bad is not None:
        return f"the key name holds the control character {bad[1]} at offset {bad[0]}"
    if not key:
        return "the key name is empty"
    if len(key) > MAX_KEY_CHARS:
        return f"the key name is {len(key):,} characters long; the limit is {MAX_KEY_CHARS}"
    return None


def _is_long(loc: Location) -> bool:
    return any(loc[: len(prefix)] == prefix for prefix in _LONG_PREFIXES)


def seat_problems(seat: Seat) -> list[tuple[Location, str]]:
    """Rules across keys, each with the key it is reported against (the loader adds the line)."""
    problems = _drafter_problems(seat)
    problems += _acceptance_problems(seat)
    problems += _canary_problems(seat)
    problems += _replica_problems(seat)
    problems += _cpu_problems(seat)
    problems.extend(port_problems(seat))
    return problems


def _drafter_problems(seat: Seat) -> list[tuple[Location, str]]:
    """[drafter]: its extra keys, its path, its per-batch-size schedule."""
    problems: list[tuple[Location, str]] = []
    drafter = seat.drafter
    if drafter is None:
        return problems
    for key in drafter.extra:
        if key in RESERVED_EXTRA_KEYS:
            problems.append((
                ("drafter", "extra", key),
                f"{key!r} is set by the [drafter] table itself, not by extra",
            ))
        elif key == "tensor_parallel_size":
            # vllm/config/speculative.py (SpeculativeConfig._verify_args): "Please pass
            # 'draft_tensor_parallel_size' instead."
            problems.append((
                ("drafter", "extra", key),
                "vLLM rejects 'tensor_parallel_size'; use 'draft_tensor_parallel_size'",
            ))
    if drafter.path is None and drafter.method in METHODS_NEEDING_PATH:
        problems.append(
            (("drafter", "method"), f"method {drafter.method!r} needs a drafter 'path'")
        )
    schedule = drafter.num_speculative_tokens_per_batch_size
    if schedule is not None:
        top = max(k for _, _, k in schedule)
        if top > drafter.num_speculative_tokens:
            problems.append((
                ("drafter", "num_speculative_tokens_per_batch_size"),
                f"drafts up to {top} tokens but num_speculative_tokens is "
                f"{drafter.num_speculative_tokens}",
            ))
    return problems


def _acceptance_problems(seat: Seat) -> list[tuple[Location, str]]:
    """[watch] expected_acceptance_length against the drafter."""
    expected = seat.watch.expected_acceptance_length
    drafter = seat.drafter
    if expected is None:
        return []
    if drafter is None:
        return [(
            ("watch", "expected_acceptance_length"),
            "the seat has no [drafter]: nothing is drafted, so nothing is accepted",
        )]
    if expected > 1 + drafter.num_speculative_tokens:
        # each step accepts at most K drafted tokens plus the one the target adds
        return [(
            ("watch", "expected_acceptance_length"),
            f"{expected:g} is above 1 + num_speculative_tokens = "
            f"{1 + drafter.num_speculative_tokens}, the most a step can accept",
        )]
    return []


def _canary_problems(seat: Seat) -> list[tuple[Location, str]]:
    """[canary] against the drafter."""
    if seat.canary.enabled and seat.drafter is None:
        # vLLM refuses --per-request-spec-decode-metrics without a speculative config
        # (vllm/config/vllm.py, VllmConfig.__post_init__)
        return [(("canary", "enabled"),
                 "the seat has no [drafter]: a drafter canary has nothing to check")]
    return []


def _replica_problems(seat: Seat) -> list[tuple[Location, str]]:
    """[replicas]: mode against pairs, reserved names, one name per pair."""
    problems: list[tuple[Location, str]] = []
    replicas = seat.replicas
    if replicas.mode == "explicit" and not replicas.pairs:
        problems.append((("replicas", "mode"), "mode 'explicit' needs 'pairs'"))
    if replicas.mode == "auto" and replicas.pairs:
        problems.append((("replicas", "pairs"), "'pairs' is only read with mode = 'explicit'"))
    for index, name in enumerate(replicas.names or ()):
        if name in RESERVED_REPLICA_NAMES:
            problems.append((
                ("replicas", "names"),
                f"replica name {name!r} (names[{index}]) is the name of the seat's own "
                f"rocmseat-{seat.name}-{name}.service unit: the replica's unit would be "
                f"replaced by it (reserved: {', '.join(RESERVED_REPLICA_NAMES)})",
            ))
    if replicas.pairs and replicas.names is not None and len(replicas.names) != len(replicas.pairs):
        problems.append((
            ("replicas", "names"), f"{len(replicas.names)} names for {len(replicas.pairs)} pairs"
        ))
    return problems


def _cpu_problems(seat: Seat) -> list[tuple[Location, str]]:
    """backend 'cpu': one process, no GPU pairs, no GPU memory share."""
    problems: list[tuple[Location, str]] = []
    if seat.backend != "cpu":
        return problems
    if seat.tp != 1:
        problems.append((("tp",), "backend 'cpu' runs with tp = 1"))
    if seat.replicas.mode != "auto":
        problems.append((("replicas", "mode"), "backend 'cpu' has no GPU pairs: use 'auto'"))
    if seat.serve.gpu_memory_utilization is not None:
        problems.append((
            ("serve", "gpu_memory_utilization"), "is for backend 'rocm' only"
        ))
    return problems


def known_replica_count(seat: Seat) -> int:
    """Replicas the seat file alone tells: its pairs or names; cpu: 1; rocm auto: at least 1."""
    replicas = seat.replicas
    if replicas.pairs:
        return len(replicas.pairs)
    if replicas.names is not None:
        return len(replicas.names)
    return 1


def port_problems(seat: Seat) -> list[tuple[Location, str]]:
    """Replica ports past 65535, and an exporter listening on a replica's port, as far as the
    file alone tells (an auto seat's replicas beyond its names are counted where the placement
    is resolved: rocmseat.placement.resolve.check_exporter_port)."""
    problems: list[tuple[Location, str]] = []
    count = known_replica_count(seat)
    first, last = planned_port(seat, 0), planned_port(seat, count - 1)
    if last > 65535:
        problems.append((
            ("serve", "port_base"),
            f"{count} replica(s) need ports {first}..{last}, past 65535",
        ))
    listen = seat.watch.exporter_listen
    if listen is not None and listen != "off":
        _, port = check_listen(listen)  # the model checked the shape already
        if first <= port <= last:
            index = port - first
            who = replica_name(seat, index)
            problems.append((
                ("watch", "exporter_listen"),
                f"port {port} is replica {who}'s port "
                f"(serve.port_base {first} + {index}); pick a port outside {first}..{last}",
            ))
    return problems
