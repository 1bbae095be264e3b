"""The replica plan (pure): a replica's placement + the seat -> how the engine starts.

Where a replica runs (its name, port, GPU pair, HIP indices, NUMA node, cache and state dirs) is
the placement's answer (rocmseat.placement); this module only turns one placement record
into the engine's environment, argv and CPU binding method. It derives none of the record's
fields again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat import exitcodes
from rocmseat.cache.layout import cache_env
from rocmseat.engines import seat_engine
from rocmseat.engines import vllm as vllm_engine
from rocmseat.hip.numbering import HIP_MASKS
from rocmseat.launch.sdnotify import NOTIFY_ENV
from rocmseat.placement.record import HIP_ORDER_ASSUMED, HIP_ORDER_PROBED, ReplicaPlacement
from rocmseat.redact import redact_argv, redact_env
from rocmseat.seat.model import Seat

__all__ = ["HIP_ORDER_ASSUMED", "HIP_ORDER_PROBED", "Binding", "KeyStatus", "ReplicaPlan",
           "engine_argv", "engine_env", "plan_replica", "plan_replicas", "speculative_config"]


@dataclass(frozen=True, slots=True)
class Binding:
    numa_node: int | None
    cpulist: str | None  # cpulist text of the node
    cpus: tuple[int, ...]  # the CPUs of the node (empty when unknown)
    method: str  # "numactl" | "cpu-affinity" | "none"
    note: str  # why this method, in words


@dataclass(frozen=True, slots=True)
class KeyStatus:
    """The config key of a replica, or why it is unknown (e.g. a dry run without the engine)."""

    digest: str | None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    seat: str
    placement: ReplicaPlacement
    backend: str
    binding: Binding
    env: Mapping[str, str]  # what the replica adds to the inherited environment
    engine_argv: tuple[str, ...]
    argv: tuple[str, ...]  # binding prefix + engine argv
    key: KeyStatus

    @property
    def replica(self) -> str:
        return self.placement.replica

    @property
    def index(self) -> int:
        return self.placement.index

    @property
    def pci_pair(self) -> tuple[str, ...]:
        return self.placement.pci_pair

    @property
    def hip_indices(self) -> tuple[int, ...] | None:
        return self.placement.hip_indices

    @property
    def hip_index_source(self) -> str:
        return self.placement.hip_index_source

    @property
    def host(self) -> str:
        return self.placement.host

    @property
    def port(self) -> int:
        return self.placement.port

    @property
    def cache_dir(self) -> Path:
        return self.placement.cache_dir

    @property
    def probe_url(self) -> str:
        return self.placement.base_url

    def refusal(self) -> tuple[int, str] | None:
        """(exit status, why) when `launch` refuses to start this plan, else None: a pair that
        is no longer there (the replica's identity, docs/launch.md) is a refused start (1);
        GPUs HIP cannot see are "no device" (2)."""
        if self.placement.lost:
            return exitcodes.PROBLEM, self.placement.lost
        if self.pci_pair and self.hip_indices is None:
            return exitcodes.CANNOT_CHECK, self.placement.hip_note
        return None

    def to_json(self) -> dict[str, Any]:
        """The plan as `launch --dry-run --json` prints it: secrets redacted (rocmseat.redact)."""
        record = self.placement
        return {
            "replica": record.replica,
            "index": record.index,
            "backend": self.backend,
            "pci_pair": list(record.pci_pair),
            "hip_indices": None if record.hip_indices is None else list(record.hip_indices),
            "hip_index_source": record.hip_index_source,
            "hip_note": record.hip_note,
            "binding": {
                "numa_node": self.binding.numa_node,
                "cpulist": self.binding.cpulist,
                "method": self.binding.method,
                "note": self.binding.note,
            },
            "host": record.host,
            "port": record.port,
            "cache_dir": str(record.cache_dir),
            "state_dir": str(record.state_dir),
            "env": dict(sorted(redact_env(self.env).items())),
            "argv": redact_argv(self.argv),
            "key": {"digest": self.key.digest, "reason": self.key.reason},
            "refused": None if (refused := self.refusal()) is None else {
                "exit_code": refused[0], "reason": refused[1]},
        }


def speculative_config(seat: Seat) -> dict[str, Any] | None:
    """The --speculative-config object (vllm/config/speculative.py field names)."""
    return vllm_engine.speculative_config(seat)


def engine_argv(seat: Seat, port: int) -> tuple[str, ...]:
    """The serve argv of the seat's engine (`[engine] kind`, rocmseat.engines)."""
    return seat_engine(seat).serve_argv(seat, port)


def plan_replica(seat: Seat, record: ReplicaPlacement, *, numactl: str | None,
                 key: KeyStatus | None = None,
                 cache_vars: Mapping[str, str] | None = None) -> ReplicaPlan:
    """How the engine of `record` starts. `cache_vars`: the cache store's variables for the
    replica's dir (default: the layout's, rocmseat.cache.layout.cache_env)."""
    env = dict(seat.env)
    env.update(cache_vars if cache_vars is not None
               else cache_env(record.cache_dir, seat_engine(seat).cache_subdirs))
    # The engine's output goes to a pipe: unbuffered, each line reaches the journal and the
    # startup-log classifier when it is written, not when a 8 KiB buffer fills.
    env.setdefault("PYTHONUNBUFFERED", "1")
    if record.pci_pair and record.hip_indices is not None:
        env["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in record.hip_indices)
    binding = _binding(seat, record, numactl)
    engine = engine_argv(seat, record.port)
    prefix: tuple[str, ...] = ()
    if binding.method == "numactl" and numactl is not None:
        node = str(binding.numa_node)
        prefix = (numactl, f"--cpunodebind={node}", f"--membind={node}")
    return ReplicaPlan(
        seat=seat.name, placement=record, backend=seat.backend, binding=binding, env=env,
        engine_argv=engine, argv=prefix + engine, key=key or KeyStatus(None, "not computed"),
    )


def plan_replicas(seat: Seat, records: Sequence[ReplicaPlacement], *, numactl: str | None,
                  keys: Mapping[str, KeyStatus] | None = None) -> tuple[ReplicaPlan, ...]:
    return tuple(plan_replica(seat, r, numactl=numactl, key=(keys or {}).get(r.replica))
                 for r in records)


def engine_env(environ: Mapping[str, str], plan: ReplicaPlan) -> dict[str, str]:
    """The engine's whole environment: the inherited one without NOTIFY_SOCKET (only rocmseat
    reports readiness) and without an inherited HIP-level mask (the plan's HIP_VISIBLE_DEVICES
    is the one; vLLM asserts an inherited CUDA_VISIBLE_DEVICES equals it,
    vllm/platforms/rocm.py), plus the plan's variables. An inherited ROCR_VISIBLE_DEVICES stays:
    the placement's numbering already counts it (rocmseat.hip.numbering)."""
    dropped = {NOTIFY_ENV, *HIP_MASKS} if plan.pci_pair else {NOTIFY_ENV}
    env = {k: v for k, v in environ.items() if k not in dropped}
    env.update(plan.env)
    return env


def _binding(seat: Seat, record: ReplicaPlacement, numactl: str | None) -> Binding:
    numa = record.numa
    if seat.backend == "cpu":
        return Binding(None, None, (), "none", numa.note)
    if numa.node is None:
        return Binding(None, None, (), "none", numa.note)
    node_id = numa.node
    if numactl is not None:
        return Binding(node_id, numa.cpulist, numa.cpus, "numactl",
                       f"numactl --cpunodebind={node_id} --membind={node_id}")
    if numa.cpus:
        return Binding(node_id, numa.cpulist, numa.cpus, "cpu-affinity",
                       "numactl not found: CPU affinity only, memory not bound (first touch)")
    return Binding(node_id, None, (), "none",
                   f"numactl not found and node {node_id} has no readable cpulist: not bound")
