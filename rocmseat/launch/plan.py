"""The replica plan (pure): seat + inventory + pairs + cache env -> how each replica starts.

Per replica: its name, PCI pair, HIP device indices, NUMA binding, port, environment and argv.

HIP device indices are mapped by PCI address, never by DRM card index (cards can be card1,
card9, ... on one node). Assumption, stated: with no ROCR_/HIP_VISIBLE_DEVICES set, HIP numbers
the GPUs it can use in PCI bus order, the order ROCr enumerates KFD topology nodes on Linux
(ROCm docs "GPU isolation techniques", https://rocm.docs.amd.com/en/latest/conceptual/gpu-isolation.html:
HIP_VISIBLE_DEVICES takes "device indices"). The plan says which source gave the indices; when
the hip room's probe has mapped index -> PCI bus id with hipDeviceGetPCIBusId, pass that map
as `hip_index_by_pci` and it wins over the assumption.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat.cache.layout import cache_env
from rocmseat.errors import ConfigError, NoDeviceError
from rocmseat.findings import Finding, Severity
from rocmseat.node.inventory import Inventory
from rocmseat.preflight.pairs import Pair
from rocmseat.seat.locate import Loc, format_loc, locate
from rocmseat.seat.model import Seat

HIP_ORDER_ASSUMED = "pci-bus-order"
HIP_ORDER_PROBED = "hip-probe"
# Set per replica from its pair; a seat that sets them would put both replicas on one pair.
DEVICE_SELECTION_ENV = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
                        "GPU_DEVICE_ORDINAL")


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
    replica: str
    index: int
    backend: str
    pci_pair: tuple[str, ...]  # empty for backend cpu
    hip_indices: tuple[int, ...]
    hip_index_source: str  # HIP_ORDER_ASSUMED | HIP_ORDER_PROBED | "" (cpu)
    binding: Binding
    host: str
    port: int
    cache_dir: Path
    env: Mapping[str, str]  # what the replica adds to the inherited environment
    engine_argv: tuple[str, ...]
    argv: tuple[str, ...]  # binding prefix + engine argv
    key: KeyStatus

    @property
    def probe_url(self) -> str:
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        return {
            "replica": self.replica,
            "index": self.index,
            "backend": self.backend,
            "pci_pair": list(self.pci_pair),
            "hip_indices": list(self.hip_indices),
            "hip_index_source": self.hip_index_source,
            "binding": {
                "numa_node": self.binding.numa_node,
                "cpulist": self.binding.cpulist,
                "method": self.binding.method,
                "note": self.binding.note,
            },
            "host": self.host,
            "port": self.port,
            "cache_dir": str(self.cache_dir),
            "env": dict(sorted(self.env.items())),
            "argv": list(self.argv),
            "key": {"digest": self.key.digest, "reason": self.key.reason},
        }


def seat_error(seat: Seat, loc: Loc, why: str, hint: str | None = None) -> ConfigError:
    """A ConfigError naming the seat file, the key's line and the key."""
    where = str(seat.source_path or seat.name)
    if seat.source_path is not None:
        try:
            line = locate(seat.source_path.read_text(encoding="utf-8"), loc)
        except OSError:
            line = None
        if line is not None:
            where = f"{where}:{line}"
    return ConfigError(f"{where}: key '{format_loc(loc)}': {why}", hint=hint)


def speculative_config(seat: Seat) -> dict[str, Any] | None:
    """The --speculative-config object (vllm/config/speculative.py field names)."""
    drafter = seat.drafter
    if drafter is None:
        return None
    config: dict[str, Any] = {"method": drafter.method}
    if drafter.path is not None:
        config["model"] = str(drafter.path)
    config["num_speculative_tokens"] = drafter.num_speculative_tokens
    if drafter.num_speculative_tokens_per_batch_size is not None:
        config["num_speculative_tokens_per_batch_size"] = [
            list(entry) for entry in drafter.num_speculative_tokens_per_batch_size
        ]
    config.update(sorted(drafter.extra.items()))
    return config


def engine_argv(seat: Seat, port: int) -> tuple[str, ...]:
    serve = seat.serve
    argv = list(seat.engine.command)
    if seat.engine.model_flag:
        argv += [seat.engine.model_flag, str(seat.model.path)]
    else:
        argv.append(str(seat.model.path))
    argv += ["--served-model-name", seat.model.served_name or seat.name]
    if seat.backend == "rocm":
        argv += ["--tensor-parallel-size", str(seat.tp)]
    spec = speculative_config(seat)
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    argv += ["--max-model-len", str(serve.max_model_len), "--max-num-seqs", str(serve.max_num_seqs)]
    if serve.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(serve.max_num_batched_tokens)]
    if seat.backend == "rocm" and serve.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", f"{serve.gpu_memory_utilization:g}"]
    argv += ["--dtype", serve.dtype]
    if serve.quantization:
        argv += ["--quantization", serve.quantization]
    argv += ["--host", seat.engine.host, "--port", str(port), *serve.extra_args]
    return tuple(argv)


def replica_pairs(seat: Seat, inventory: Inventory | None,
                  proposed: Sequence[Pair]) -> tuple[tuple[str, ...], ...]:
    """The GPU tuple of each replica: explicit pairs from the seat, else the proposed pairs."""
    if seat.backend == "cpu":
        return ((),)
    if inventory is None or not inventory.gpus:
        raise NoDeviceError("no AMD GPU in the inventory: a rocm seat has nothing to run on")
    if seat.replicas.mode == "explicit":
        pairs = tuple(tuple(p) for p in seat.replicas.pairs or ())
        known = {g.pci_address for g in inventory.gpus}
        for i, pair in enumerate(pairs):
            for address in pair:
                if address not in known:
                    raise seat_error(seat, ("replicas", "pairs", i),
                                     f"GPU {address} is not in the inventory of "
                                     f"{inventory.sysfs_root} ({', '.join(sorted(known))})")
        return pairs
    if not proposed:
        raise NoDeviceError(
            f"no socket-local GPU pair among {len(inventory.gpus)} GPUs",
            hint="run `rocmseat preflight` to see why, or set [replicas] mode = 'explicit'",
        )
    return tuple(p.addresses() for p in proposed)


def plan_replicas(
    seat: Seat,
    inventory: Inventory | None,
    proposed: Sequence[Pair],
    *,
    numactl: str | None,
    keys: Mapping[str, KeyStatus] | None = None,
    cache_envs: Mapping[str, Mapping[str, str]] | None = None,
    hip_index_by_pci: Mapping[str, int] | None = None,
) -> tuple[ReplicaPlan, ...]:
    if seat.backend == "rocm":
        for name in DEVICE_SELECTION_ENV:
            if name in seat.env:
                raise seat_error(seat, ("env", name), "is set per replica by rocmseat from its "
                                 "GPU pair; remove it from [env]")
    pairs = replica_pairs(seat, inventory, proposed)
    try:
        names = seat.replica_names(len(pairs))
    except ValueError as exc:
        raise seat_error(seat, ("replicas", "names"), str(exc)) from None
    plans = []
    for index, (name, pair) in enumerate(zip(names, pairs, strict=True)):
        if seat.backend == "rocm" and len(pair) != seat.tp:
            raise seat_error(seat, ("tp",), f"tp = {seat.tp} but replica {name} has "
                             f"{len(pair)} GPUs ({', '.join(pair)})")
        cache_dir = seat.cache_root / name
        env = dict(seat.env)
        env.update((cache_envs or {}).get(name) or cache_env(cache_dir))
        # The engine's output goes to a pipe: unbuffered, each line reaches the journal and the
        # startup-log classifier when it is written, not when a 8 KiB buffer fills.
        env.setdefault("PYTHONUNBUFFERED", "1")
        indices, source = _hip_indices(pair, inventory, hip_index_by_pci)
        if pair:
            env["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in indices)
        binding = _binding(seat, pair, inventory, numactl)
        port = seat.port_of(index)
        engine = engine_argv(seat, port)
        prefix: tuple[str, ...] = ()
        if binding.method == "numactl" and numactl is not None:
            node = str(binding.numa_node)
            prefix = (numactl, f"--cpunodebind={node}", f"--membind={node}")
        key = (keys or {}).get(name) or KeyStatus(None, "not computed")
        plans.append(ReplicaPlan(
            seat=seat.name, replica=name, index=index, backend=seat.backend, pci_pair=pair,
            hip_indices=indices, hip_index_source=source, binding=binding,
            host=seat.engine.host, port=port, cache_dir=cache_dir, env=env,
            engine_argv=engine, argv=prefix + engine, key=key,
        ))
    return tuple(plans)


def _hip_indices(pair: tuple[str, ...], inventory: Inventory | None,
                 probed: Mapping[str, int] | None) -> tuple[tuple[int, ...], str]:
    if not pair or inventory is None:
        return (), ""
    if probed is not None and all(a in probed for a in pair):
        return tuple(probed[a] for a in pair), HIP_ORDER_PROBED
    order = sorted(g.pci_address for g in inventory.gpus)
    return tuple(order.index(a) for a in pair), HIP_ORDER_ASSUMED


def _binding(seat: Seat, pair: tuple[str, ...], inventory: Inventory | None,
             numactl: str | None) -> Binding:
    if seat.backend == "cpu" or inventory is None:
        return Binding(None, None, (), "none", "backend cpu: no GPU to be near")
    gpus = [inventory.gpu(a) for a in pair]
    nodes = {g.numa_node for g in gpus if g is not None}
    if len(nodes) != 1 or None in nodes:
        shown = ", ".join("unknown" if n is None else str(n) for n in sorted(nodes, key=str))
        return Binding(None, None, (), "none",
                       f"the pair's GPUs do not share one known NUMA node ({shown}): not bound")
    node_id = nodes.pop()
    assert node_id is not None
    node = next((n for n in inventory.numa_nodes if n.node_id == node_id), None)
    cpulist = node.cpulist if node is not None else None
    cpus = tuple(node.cpus or ()) if node is not None else ()
    if numactl is not None:
        return Binding(node_id, cpulist, cpus, "numactl",
                       f"numactl --cpunodebind={node_id} --membind={node_id}")
    if cpus:
        return Binding(node_id, cpulist, cpus, "cpu-affinity",
                       "numactl not found: CPU affinity only, memory not bound (first touch)")
    return Binding(node_id, None, (), "none",
                   f"numactl not found and node {node_id} has no readable cpulist: not bound")


def probed_hip_order(findings: Iterable[Finding]) -> dict[str, int] | None:
    """PCI address -> HIP index as the HIP probe saw it (hipDeviceGetPCIBusId of each index,
    in the `devices` data of an ok `hip.runtime` finding), or None when it did not run."""
    for finding in findings:
        if finding.check_id == "hip.runtime" and finding.severity is Severity.OK:
            devices = finding.data.get("devices")
            if isinstance(devices, list) and devices and all(isinstance(d, str) for d in devices):
                return {d.lower(): i for i, d in enumerate(devices)}
    return None


def with_probed_hip_indices(plan: ReplicaPlan, order: Mapping[str, int]) -> ReplicaPlan:
    """The plan with the probe's HIP indices (unchanged if the probe did not see the pair)."""
    if not plan.pci_pair or not all(a in order for a in plan.pci_pair):
        return plan
    indices = tuple(order[a] for a in plan.pci_pair)
    env = {**plan.env, "HIP_VISIBLE_DEVICES": ",".join(str(i) for i in indices)}
    return dataclasses.replace(plan, hip_indices=indices, hip_index_source=HIP_ORDER_PROBED,
                               env=env)
