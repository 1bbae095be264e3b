"""Rules across keys of a seat (the per-key rules live on the model, rocmseat.seat.model).

Pure: a validated Seat in, (key path, why) out; the loader adds the file and line.
"""

from __future__ import annotations

from rocmseat.seat.model import METHODS_NEEDING_PATH, RESERVED_EXTRA_KEYS, Seat

Location = tuple[str | int, ...]


def seat_problems(seat: Seat) -> list[tuple[Location, str]]:
    """Rules across keys, each with the key it is reported against (the loader adds the line)."""
    problems: list[tuple[Location, str]] = []
    drafter = seat.drafter
    if drafter is not None:
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
    replicas = seat.replicas
    if replicas.mode == "explicit" and not replicas.pairs:
        problems.append((("replicas", "mode"), "mode 'explicit' needs 'pairs'"))
    if replicas.mode == "auto" and replicas.pairs:
        problems.append((("replicas", "pairs"), "'pairs' is only read with mode = 'explicit'"))
    if replicas.pairs and replicas.names is not None and len(replicas.names) != len(replicas.pairs):
        problems.append((
            ("replicas", "names"), f"{len(replicas.names)} names for {len(replicas.pairs)} pairs"
        ))
    if seat.backend == "cpu":
        if seat.tp != 1:
            problems.append((("tp",), "backend 'cpu' runs with tp = 1"))
        if replicas.mode != "auto":
            problems.append((("replicas", "mode"), "backend 'cpu' has no GPU pairs: use 'auto'"))
        if seat.serve.gpu_memory_utilization is not None:
            problems.append((
                ("serve", "gpu_memory_utilization"), "is for backend 'rocm' only"
            ))
    problems.extend(port_problems(seat))
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
    """Replica ports past 65535, and an exporter listening on a replica's port."""
    problems: list[tuple[Location, str]] = []
    count = known_replica_count(seat)
    first, last = seat.port_of(0), seat.port_of(count - 1)
    if last > 65535:
        problems.append((
            ("serve", "port_base"),
            f"{count} replica(s) need ports {first}..{last}, past 65535",
        ))
    listen = seat.watch.exporter_listen
    if listen is not None and listen != "off":
        _, _, port_text = listen.rpartition(":")
        if not port_text.isdigit():
            problems.append((("watch", "exporter_listen"), f"{listen!r} is not HOST:PORT or 'off'"))
        elif first <= int(port_text) <= last:
            index = int(port_text) - first
            names = seat.replicas.names
            who = names[index] if names is not None and index < len(names) else f"r{index}"
            problems.append((
                ("watch", "exporter_listen"),
                f"port {port_text} is replica {who}'s port "
                f"(serve.port_base {first} + {index}); pick a port outside {first}..{last}",
            ))
    return problems
