"""Judge NUMA locality and TP2 pairs (family `numa`).

`numa_node` -1 means the firmware gave no _PXM (Documentation/ABI/testing/sysfs-bus-pci); on a
multi-socket host that is a defect worth a warning, and the socket is inferred from the CPUs in
`local_cpulist`. A pair that straddles sockets host-stages every all-reduce (cross-socket HIP IPC
fails with hipErrorInvalidDevicePointer on the X99 platform, docs/architecture.md incident 2).
"""

from __future__ import annotations

from collections.abc import Sequence

from rocmseat.findings import Finding, Subject
from rocmseat.node.inventory import Gpu, Inventory
from rocmseat.preflight.pairs import Pair, make_pair, pair_json
from rocmseat.sysfs.attrs import errors_of, first_of


def _locality_errors(gpu: Gpu, inventory: Inventory) -> list[str]:
    """Why the files the socket is inferred from could not be read (none on a sane tree)."""
    errors = errors_of(gpu.errors, "numa_node", "local_cpulist")
    node = next((n for n in inventory.numa_nodes if n.node_id == gpu.numa_node), None)
    if node is not None:
        errors += node.errors
    return errors + list(inventory.cpu_errors)


def judge_locality(gpu: Gpu, inventory: Inventory) -> list[Finding]:
    subject = gpu.pci_address
    data: dict[str, object] = {
        "numa_node": gpu.numa_node,
        "socket": gpu.socket,
        "socket_source": gpu.socket_source,
        "local_cpulist": gpu.local_cpulist,
    }
    errors = _locality_errors(gpu, inventory)
    if errors:
        # the socket may still have been inferred, but from a partial reading: never a quiet ok
        socket = "unknown" if gpu.socket is None else str(gpu.socket)
        return [
            Subject(subject).unknown(
                "numa.unknown",
                f"cannot read the GPU's locality: {first_of(errors)}; socket {socket} "
                f"({gpu.socket_source})",
                "check numa_node, local_cpulist, node*/cpulist and cpu*/topology in the tree",
                {**data, "errors": errors},
            )
        ]
    host_nodes = sorted(n.node_id for n in inventory.numa_nodes)
    if gpu.numa_node is not None and gpu.numa_node not in host_nodes:
        # numa_node names a node the host does not have (a firmware _PXM out of range, or a
        # broken tree): whatever socket was inferred around it is not to be trusted
        nodes = ", ".join(str(n) for n in host_nodes) or "none"
        socket = "unknown" if gpu.socket is None else str(gpu.socket)
        return [
            Subject(subject).unknown(
                "numa.unknown",
                f"numa_node {gpu.numa_node} is not a NUMA node of this host (nodes: {nodes}); "
                f"socket {socket} ({gpu.socket_source})",
                "check the BIOS's PCI proximity (ACPI _PXM) and devices/system/node in the tree",
                {**data, "host_numa_nodes": host_nodes},
            )
        ]
    if gpu.numa_node_raw == -1 and inventory.multi_socket:
        if gpu.socket is None:
            text = f"socket unknown ({gpu.socket_source}); the GPU cannot be paired"
        else:
            text = f"socket {gpu.socket} inferred from the {gpu.socket_source}"
        return [
            Subject(subject).warn(
                "numa.node_unknown",
                f"numa_node is -1 on a {len(inventory.sockets)}-socket host (no ACPI _PXM); {text}",
                "update the BIOS / enable NUMA-aware PCI affinity (ACPI _PXM, SRAT)", data,
            )
        ]
    if gpu.socket is None:
        return [
            Subject(subject).unknown(
                "numa.socket_unknown", f"cannot tell the GPU's socket: {gpu.socket_source}",
                "check devices/system/cpu/cpu*/topology/physical_package_id", data,
            )
        ]
    node = "NUMA node unknown (-1)" if gpu.numa_node is None else f"NUMA node {gpu.numa_node}"
    return [
        Subject(subject).ok(
            "numa.locality",
            f"{node}, socket {gpu.socket} ({gpu.socket_source}), CPUs {gpu.local_cpulist}", "",
            data,
        )
    ]


def _asymmetry(pair: Pair) -> str:
    if pair.symmetric:
        return f"symmetric links ({pair.link_a})"
    why = (
        "a link is degraded (see pcie.link)"
        if pair.degraded
        else "the narrower link bounds the pair's host bandwidth; by design on a bifurcated slot"
    )
    return f"asymmetric links: {pair.a} {pair.link_a}, {pair.b} {pair.link_b} ({why})"


def judge_proposed(pairs: Sequence[Pair], inventory: Inventory) -> list[Finding]:
    """`numa.pair` for each proposed pair; `numa.pair.unpaired` for each GPU left over."""
    findings = []
    for pair in pairs:
        node = "" if pair.numa_node is None else f", NUMA node {pair.numa_node}"
        findings.append(
            Subject(pair.subject).ok(
                "numa.pair", f"proposed TP2 pair on socket {pair.socket}{node}; {_asymmetry(pair)}",
                "", pair_json(pair),
            )
        )
    taken = {a for pair in pairs for a in pair.addresses()}
    for gpu in inventory.gpus:
        if gpu.pci_address in taken:
            continue
        if gpu.socket is None:
            findings.append(
                Subject(gpu.pci_address).warn(
                    "numa.pair.unpaired",
                    "not paired: its socket is unknown, and a pair must not straddle sockets",
                )
            )
        else:
            findings.append(
                Subject(gpu.pci_address).ok(
                    "numa.pair.unpaired", f"no socket-local partner left on socket {gpu.socket}",
                )
            )
    return findings


def _xgmi_joined(inventory: Inventory, a: str, b: str) -> bool:
    if not any(g.amdgpu.xgmi is not None for g in inventory.gpus):
        return False  # no hive: the xgmi module stays unimported (start-up budget)
    from rocmseat.preflight.xgmi import link_problem

    return link_problem(inventory, a, b) is None


def judge_requested(requested: Sequence[tuple[str, str]], inventory: Inventory) -> list[Finding]:
    """Verify pairs named by `--pair` or a profile: present, same socket."""
    findings = []
    for a, b in requested:
        subject = f"{min(a, b)}+{max(a, b)}"
        gpu_a, gpu_b = inventory.gpu(a), inventory.gpu(b)
        missing = [x for x, g in ((a, gpu_a), (b, gpu_b)) if g is None]
        if missing:
            findings.append(
                Subject(subject).fail(
                    "numa.pair.missing", f"no amdgpu device at {', '.join(missing)}",
                    "check the address (rocmseat preflight lists the GPUs) or the hardware",
                )
            )
            continue
        assert gpu_a is not None and gpu_b is not None
        pair = make_pair(gpu_a, gpu_b)
        if gpu_a.socket is None or gpu_b.socket is None:
            findings.append(
                Subject(subject).unknown(
                    "numa.pair.unknown",
                    "cannot tell whether the pair shares a socket (a GPU's socket is unknown)", "",
                    pair_json(pair),
                )
            )
        elif gpu_a.socket != gpu_b.socket and _xgmi_joined(inventory, a, b):
            findings.append(
                Subject(subject).ok(
                    "numa.pair", f"pair on sockets {gpu_a.socket} and {gpu_b.socket}, joined by "
                    "one active XGMI hop (no host-staged all-reduce: rocmseat.preflight.xgmi)",
                    "", pair_json(pair),
                )
            )
        elif gpu_a.socket != gpu_b.socket:
            findings.append(
                Subject(subject).fail(
                    "numa.pair.cross_socket",
                    f"pair straddles sockets {gpu_a.socket} and {gpu_b.socket}: "
                    "cross-socket HIP IPC fails on such platforms and every all-reduce "
                    "is host-staged",
                    "pair GPUs on one socket (see the proposed pairs)", pair_json(pair),
                )
            )
        else:
            findings.append(
                Subject(subject).ok(
                    "numa.pair", f"pair on socket {pair.socket}; {_asymmetry(pair)}", "",
                    pair_json(pair),
                )
            )
    return findings
