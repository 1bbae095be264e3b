"""Judge the XGMI hive (family `xgmi`; rocmseat.sysfs.xgmi and gpu_metrics read it).

vLLM's custom all-reduce on ROCm above TP2 needs every pair of the group one XGMI hop apart
(vllm/platforms/rocm.py; vllm/distributed/device_communicators/custom_all_reduce.py falls back
to RCCL otherwise, silently): a hive that lost a link serves correctly and slower.

Per GPU:
- `xgmi.hive`: every Instinct GPU of the node is a member of one hive. A GPU with no `xgmi_*`
  files while others are in a hive failed to join (amdgpu_xgmi_add_device(): "XGMI: Failed to
  add node"): fail, as is a second hive id, or a hive with fewer members than the node has
  Instinct GPUs (or than the profile's `[xgmi] hive_members`).
- `xgmi.link`: gpu_metrics' `xgmi_link_status[]` (amdgpu_get_xgmi_link_status(): 1 active, 0
  inactive). Fewer active links than the PSP topology counts (`xgmi_num_links` over the peers)
  fail; each inactive link is named with its peer where `xgmi_port_num` maps its port. No
  readable status (gpu_metrics before v1.7, a part without XGMI IP 6.4, every entry all-ones):
  unknown, never ok.
- `xgmi.peer`: a peer more than one hop away (`xgmi_num_hops` bits 2:0) warns (launch refuses a
  TP group across it: rocmseat.placement.groups); fewer links to a peer than the profile's
  `links_per_peer` fail.
- `xgmi.width` / `xgmi.speed`: `xgmi_link_width` / `xgmi_link_speed` below the profile's (else
  below the widest/fastest of the hive) warn.
- `xgmi.partition`: the compute/memory partition mode other than the profile's fails (the
  devices HIP numbers, and so every TP group, change with it); a mode file that cannot be read
  is unknown (the mode enters the config key). `xgmi.read`: any other xgmi_* attribute that
  exists and cannot be read is unknown.

xgmi_wafl RAS counts (`ras/xgmi_wafl_err_count`) are judged by the ras family over the error
window like every RAS block (ue growth fails, ce growth warns: rocmseat.preflight.ras). The
kernel log's XGMI PCS lines ("%s detected" of xgmi_v6_4_0 RAS) belong to the events family.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass

from rocmseat.findings import NODE, Finding, Severity, Subject
from rocmseat.node.inventory import Gpu, Inventory
from rocmseat.preflight.aer import is_instinct
from rocmseat.sysfs.attrs import first_of
from rocmseat.sysfs.xgmi import XgmiReading

ACTIVE, INACTIVE = 1, 0  # enum amdgpu_xgmi_link_status (kgd_pp_interface.h)


@dataclass(frozen=True, slots=True)
class XgmiExpectations:
    """The profile's `[xgmi]` table; None: not expected (the hive's own best stands in for
    width and speed)."""

    hive_members: int | None = None
    links_per_peer: int | None = None
    width: int | None = None
    speed_gts: int | None = None
    compute_partition: str | None = None  # SPX ... CPX (rocmseat.sysfs.partition)
    memory_partition: str | None = None  # NPS1 ...


NO_EXPECTATIONS = XgmiExpectations()


def in_hive(inventory: Inventory) -> bool:
    """Whether any GPU of the node reports an XGMI hive (the family has something to judge)."""
    return any(g.amdgpu.xgmi is not None for g in inventory.gpus)


def judge_xgmi(inventory: Inventory, checked: tuple[Gpu, ...],
               expected: XgmiExpectations = NO_EXPECTATIONS,
               scope: Collection[str] | None = None) -> list[Finding]:
    """The xgmi findings of `checked` (GPUs of `inventory`); [] on a node with no hive and no
    expectation of one. `scope`: the GPUs of one replica (launch's gate, `--pair`): a fault
    that concerns only GPUs outside it (a dead link to a GPU of another group, a GPU outside
    the hive that is not one of them) carries none of its all-reduce and warns, not fails."""
    findings = _judge(inventory, checked, expected)
    return findings if scope is None else [_scoped(f, set(scope)) for f in findings]


def _scoped(finding: Finding, scope: set[str]) -> Finding:
    if finding.severity is not Severity.FAIL or finding.subject not in scope:
        return finding
    peer = finding.data.get("peer")
    outside = finding.data.get("outside")
    if (isinstance(peer, str) and peer not in scope) or (
            isinstance(outside, list) and outside and scope.isdisjoint(outside)):
        return dataclasses.replace(
            finding, severity=Severity.WARN,
            message=finding.message + " (outside this replica's GPUs: it carries none of its "
            "all-reduce)")
    return finding


def _judge(inventory: Inventory, checked: tuple[Gpu, ...],
           expected: XgmiExpectations) -> list[Finding]:
    if not in_hive(inventory):
        if expected.hive_members:
            return [NODE.fail("xgmi.hive", f"no GPU is in an XGMI hive; the profile expects "
                              f"{expected.hive_members} members",
                              "check dmesg for \"XGMI:\" lines (amdgpu_xgmi_add_device)")]
        return []
    instinct = [g for g in inventory.gpus if is_instinct(g) or g.amdgpu.xgmi is not None]
    want = expected.hive_members or len(instinct)
    hive_ids = {g.amdgpu.xgmi.hive_id for g in instinct
                if g.amdgpu.xgmi is not None and g.amdgpu.xgmi.hive_id is not None}
    widths = [w for g in instinct if (w := _metric(g, "xgmi_link_width")) is not None]
    speeds = [s for g in instinct if (s := _metric(g, "xgmi_link_speed_gts")) is not None]
    best = XgmiExpectations(
        expected.hive_members, expected.links_per_peer,
        expected.width or (max(widths) if widths else None),
        expected.speed_gts or (max(speeds) if speeds else None),
        expected.compute_partition, expected.memory_partition,
    )
    findings: list[Finding] = []
    for gpu in checked:
        if gpu not in instinct:
            continue
        outside = [g.pci_address for g in instinct if g.amdgpu.xgmi is None]
        findings += _hive(gpu, want, hive_ids, len(instinct), outside)
        reading = gpu.amdgpu.xgmi
        if reading is None:
            continue
        findings += _unread(gpu, reading)
        findings += _links(gpu, reading)
        findings += _peers(gpu, reading, best)
        findings += _rate(gpu, best)
        findings += _partition(gpu, best)
    return findings


def _unread(gpu: Gpu, reading: XgmiReading) -> list[Finding]:
    """An xgmi_* attribute that exists and cannot be read: unknown, never a quiet ok (the hive
    and topology checks say their own unknowns; this names the rest: xgmi_device_id,
    xgmi_physical_id, xgmi_port_num)."""
    if not reading.errors or reading.members is None or reading.hive_id is None \
            or reading.num_hops is None or reading.num_links is None:
        return []
    return [Subject(gpu.pci_address).unknown(
        "xgmi.read", f"cannot read the GPU's XGMI attributes: {first_of(list(reading.errors))}",
        "check the xgmi_* files under the GPU's PCI directory", {"errors": list(reading.errors)})]


def _partition(gpu: Gpu, expected: XgmiExpectations) -> list[Finding]:
    me = Subject(gpu.pci_address)
    reading = gpu.amdgpu.partition
    findings = []
    if reading is not None and reading.errors:
        # the mode enters the config key and the HIP numbering (rocmseat.placement): a mode
        # that cannot be read is unknown, whatever the profile says
        return [me.unknown("xgmi.partition", "cannot read the partition mode: "
                           + first_of(list(reading.errors)),
                           "check current_compute_partition and current_memory_partition "
                           "(EPERM while the GPU is in reset)", {"errors": list(reading.errors)})]
    for kind, want in (("compute", expected.compute_partition),
                       ("memory", expected.memory_partition)):
        if want is None:
            continue
        have = getattr(reading, kind) if reading is not None else None
        if have is None:
            findings.append(me.unknown("xgmi.partition", f"cannot read the {kind} partition "
                                       f"mode; the profile expects {want}",
                                       f"check current_{kind}_partition"))
        elif have != want:
            findings.append(me.fail("xgmi.partition", f"{kind} partition {have}; the profile "
                                    f"expects {want}",
                                    "a partition change renumbers the devices: re-plan the "
                                    "seats (rocmseat key shows the new key)",
                                    {"kind": kind, "mode": have, "expected": want}))
    return findings


def _metric(gpu: Gpu, name: str) -> int | None:
    metrics = gpu.amdgpu.gpu_metrics
    value = getattr(metrics, name) if metrics is not None else None
    return value if isinstance(value, int) else None


def _hive(gpu: Gpu, want: int, hive_ids: set[int], instinct: int,
          outside: list[str]) -> list[Finding]:
    me = Subject(gpu.pci_address)
    reading = gpu.amdgpu.xgmi
    hint = ("check dmesg for \"XGMI: Failed to add node\" and PSP/TA errors; a GPU outside "
            "the hive cannot join a TP group over XGMI")
    if reading is None:
        return [me.fail("xgmi.hive", f"GPU {gpu.pci_address} is in no XGMI hive (no xgmi_* "
                        f"files) while other GPUs of this node are: it failed to join", hint)]
    if reading.members is None or reading.hive_id is None:
        return [me.unknown("xgmi.hive", "cannot read the GPU's hive: "
                           + first_of(list(reading.errors) or ["xgmi_hive_id unreadable"]),
                           "check xgmi_hive_info under the GPU's PCI directory")]
    data = {"hive_id": reading.hive_id, "members": list(reading.members)}
    if len(hive_ids) > 1:
        ids = ", ".join(f"0x{h:x}" for h in sorted(hive_ids))
        return [me.fail("xgmi.hive", f"the node's GPUs are in {len(hive_ids)} XGMI hives "
                        f"({ids}); GPU {gpu.pci_address} is in 0x{reading.hive_id:x}",
                        hint, data)]
    if len(reading.members) < want:
        missing = f"{want} expected" if want != instinct else f"{instinct} Instinct GPUs here"
        out = f"; outside it: {', '.join(outside)}" if outside else ""
        return [me.fail("xgmi.hive", f"hive 0x{reading.hive_id:x} has {len(reading.members)} "
                        f"members ({missing}){out}", hint, {**data, "outside": outside})]
    return [me.ok("xgmi.hive", f"in hive 0x{reading.hive_id:x} with {len(reading.members)} "
                  "members", data=data)]


def _links(gpu: Gpu, reading: XgmiReading) -> list[Finding]:
    me = Subject(gpu.pci_address)
    metrics = gpu.amdgpu.gpu_metrics
    status = metrics.xgmi_link_status if metrics is not None else None
    topology = sum(links for _p, _h, links in reading.peers() if links)
    if status is None or all(s is None for s in status):
        why = ("no gpu_metrics" if metrics is None else
               f"gpu_metrics {metrics.revision} has no xgmi_link_status" if status is None
               else "every xgmi_link_status entry is not provided (all-ones)")
        if gpu.amdgpu.asleep:
            why += f" ({gpu.amdgpu.asleep})"
        return [me.unknown("xgmi.link", f"cannot read the xGMI link state: {why}",
                           "xgmi_link_status needs gpu_metrics v1.7+ or format 1.9 "
                           "(MI300-class, XGMI IP 6.4)")]
    active = sum(1 for s in status if s == ACTIVE)
    down = [port for port, s in enumerate(status) if s == INACTIVE]
    named = [(port, reading.port_peer(port)) for port in down]
    data = {"active": active, "topology_links": topology, "inactive_ports": down}
    findings = []
    for port, peer in named:
        if peer is not None:
            findings.append(me.fail(
                "xgmi.link", f"xGMI link to {peer} is inactive (xgmi_link_status[{port}] = 0; "
                "the topology says it exists)",
                "a link lost since the hive formed: vLLM's custom all-reduce falls back to "
                "RCCL over it; reseat/RMA per the platform guide, or serve around it",
                {**data, "peer": peer, "port": port}))
    if active < topology and not any(peer for _port, peer in named):
        findings.append(me.fail(
            "xgmi.link", f"{active} of {topology} xGMI links active (the topology counts "
            f"{topology}; ports {down} inactive, peer unknown: no xgmi_port_num)",
            "check amd-smi xgmi -l for which peer; the hive serves slower over RCCL", data))
    if not findings:
        findings.append(me.ok("xgmi.link", f"{active} xGMI links active ({topology} in the "
                              "topology)", data=data))
    return findings


def _peers(gpu: Gpu, reading: XgmiReading, expected: XgmiExpectations) -> list[Finding]:
    me = Subject(gpu.pci_address)
    if reading.num_hops is None or reading.num_links is None:
        return [me.unknown("xgmi.peer", "cannot read the hive topology: "
                           + first_of(list(reading.errors) or ["xgmi_num_hops unreadable"]),
                           "check xgmi_num_hops and xgmi_num_links")]
    findings = []
    for peer, hops, links in reading.peers():
        pair = {"peer": peer, "hops": hops, "links": links}
        if hops is None or links is None:
            findings.append(me.unknown("xgmi.peer", f"the topology lists no entry for {peer}",
                                       "xgmi_num_hops has fewer bytes than the hive has nodes",
                                       pair))
        elif expected.links_per_peer is not None and links < expected.links_per_peer:
            findings.append(me.fail(
                "xgmi.peer", f"{links} xGMI link(s) to {peer}; the profile expects "
                f"{expected.links_per_peer}", "a link missing since the hive formed", pair))
        elif hops > 1:
            findings.append(me.warn(
                "xgmi.peer", f"{peer} is {hops} hops away: launch keeps it out of this GPU's TP "
                "group (custom all-reduce needs one hop)", "", pair))
    if not findings:
        findings.append(me.ok("xgmi.peer", f"every peer one hop away "
                              f"({len(reading.peers())} peers)"))
    return findings


def _rate(gpu: Gpu, expected: XgmiExpectations) -> list[Finding]:
    me = Subject(gpu.pci_address)
    findings = []
    for check, name, want, unit in (("xgmi.width", "xgmi_link_width", expected.width, "x"),
                                    ("xgmi.speed", "xgmi_link_speed_gts", expected.speed_gts,
                                     " GT/s")):
        value = _metric(gpu, name)
        if value is None or want is None:
            continue
        shown = f"x{value}" if unit == "x" else f"{value}{unit}"
        wanted = f"x{want}" if unit == "x" else f"{want}{unit}"
        if value < want:
            findings.append(me.warn(check, f"xGMI trained at {shown}, below {wanted}",
                                    "a link trained down: every transfer over it is slower",
                                    {"value": value, "expected": want}))
    return findings


# ----- the TP-group rule's facts (rocmseat.placement.groups, numa's requested pairs) ------


def hive_of(inventory: Inventory) -> bool:
    """Whether the node's GPUs form one XGMI hive (every GPU a member, one hive id)."""
    readings = [g.amdgpu.xgmi for g in inventory.gpus]
    if not readings or any(r is None for r in readings):
        return False
    return len({r.hive_id for r in readings if r is not None}) == 1


def link_problem(inventory: Inventory, a: str, b: str) -> str | None:
    """Why GPUs a and b cannot share a TP group over XGMI, or None: both in the hive, one hop
    apart both ways, and no end reports the link between them inactive."""
    for one, other in ((a, b), (b, a)):
        gpu = inventory.gpu(one)
        reading = gpu.amdgpu.xgmi if gpu is not None else None
        if reading is None:
            return f"GPU {one} is in no XGMI hive"
        hops = {peer: h for peer, h, _links in reading.peers()}
        if other not in hops:
            return f"GPU {other} is not in {one}'s hive"
        if hops[other] is None or hops[other] != 1:
            return f"{one} -> {other} is {hops[other] or 'an unknown number of'} hops"
        down = _inactive_to(gpu, other) if gpu is not None else None
        if down is not None:
            return (f"the xGMI link {one} -> {other} is inactive "
                    f"(xgmi_link_status[{down}] = 0 on {one})")
    return None


def _inactive_to(gpu: Gpu, peer: str) -> int | None:
    reading, metrics = gpu.amdgpu.xgmi, gpu.amdgpu.gpu_metrics
    status = metrics.xgmi_link_status if metrics is not None else None
    if reading is None or status is None:
        return None
    for port, state in enumerate(status):
        if state == 0 and reading.port_peer(port) == peer:
            return port
    return None
