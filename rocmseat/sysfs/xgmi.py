"""amdgpu's XGMI hive attributes of a GPU's PCI directory (drivers/gpu/drm/amd/amdgpu/amdgpu_xgmi.c,
`amdgpu_xgmi_sysfs_add_dev_info()`), read behind the sysfs root.

- `xgmi_device_id`: the PSP node id, "%llu\\n" (amdgpu_xgmi_show_device_id);
  `xgmi_physical_id`: "%u\\n" (amdgpu_xgmi_show_physical_id).
- `xgmi_hive_info/`: the hive's kobject, a directory on the GPU that created the hive (the first
  to join) and a symlink to it on the others, holding `xgmi_hive_id` ("%llu\\n",
  amdgpu_xgmi_show_attrs) and one link `node<N>` per member, N counting the members in the
  order they joined (sprintf "node%d" of hive->number_devices after the member was added).
- `xgmi_num_hops`, `xgmi_num_links`: one "%02x " byte per hive node in the PSP topology order
  (top_info.nodes[], filled from the hive's device_list in join order: amdgpu_xgmi_add_device()),
  so byte i is the member `node<i+1>`. Hops in bits 2:0, the link type in 7:6 (the comment above
  amdgpu_xgmi_get_hops_count()); the GPU's own entry is among them.
- `xgmi_port_num` (only with the TA's EXTEND_PEER_LINK_INFO_CMD_FLAG):
  "%02x:%02x ->  %02x:%02x\\n" per link: this GPU's 1-based topology position and port, the
  peer's position and port (amdgpu_xgmi_show_connected_port_num).
- `ras/xgmi_wafl_err_count` is the RAS family's (rocmseat.sysfs.ras).

`xgmi_error` is never opened: amdgpu_xgmi_show_error() writes the FICA status register back to
0 after reading it (set_fica(adev, ficaa_pie_status_in, 0, 0)), so a read would steal the count
amd-smi and AMD's device-metrics-exporter report. KFD's io_links `max_bandwidth`/`weight` are not
read either: amdgpu_xgmi_get_bandwidth() computes them from a hard-coded lane speed, they say
nothing of a trained link. The link's live state is gpu_metrics' `xgmi_link_status[]`
(rocmseat.sysfs.gpu_metrics).

A GPU with no `xgmi_device_id` is in no hive (a Radeon part, or a GPU that failed to join): the
reading is None.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rocmseat.errors import ParseError
from rocmseat.sysfs.attrs import Collector
from rocmseat.sysfs.parse import normalize_pci_address, parse_int

MAX_HIVE_NODES = 64  # AMDGPU_MAX_XGMI_DEVICE_PER_HIVE is 8..64 across kernels; never more here
XGMI_ERROR = "xgmi_error"  # read-and-clear: never read (module docstring)
_BYTE_ROW_RE = re.compile(r"^(?:[0-9a-fA-F]{2} )*(?:[0-9a-fA-F]{2})? ?$")
_PORT_RE = re.compile(r"^([0-9a-fA-F]{2}):([0-9a-fA-F]{2}) ->  ([0-9a-fA-F]{2}):([0-9a-fA-F]{2})$")
_NODE_RE = re.compile(r"^node([1-9][0-9]{0,2})$")
HOPS_MASK = 0x7  # num_hops[2:0]
LINK_TYPE_SHIFT = 6  # num_hops[7:6]: 0 xGMI2, 1 xGMI3


@dataclass(frozen=True, slots=True)
class PortLink:
    """One line of xgmi_port_num: (1-based topology position, port) -> (peer position, port)."""

    position: int
    port: int
    peer_position: int
    peer_port: int


@dataclass(frozen=True, slots=True)
class XgmiReading:
    """A GPU's view of its hive. `members`: the PCI addresses of node1..nodeN (join order =
    topology order), None when xgmi_hive_info could not be read; `position`: this GPU's index
    in `members`; `num_hops`/`num_links`: the raw bytes per topology node, None when unread."""

    device_id: int | None
    physical_id: int | None
    hive_id: int | None
    members: tuple[str, ...] | None
    position: int | None
    num_hops: tuple[int, ...] | None
    num_links: tuple[int, ...] | None
    ports: tuple[PortLink, ...] | None  # None: no xgmi_port_num (the TA lacks extended info)
    errors: tuple[str, ...] = ()

    def peers(self) -> tuple[tuple[str, int | None, int | None], ...]:
        """(peer address, hops, links) per other member, from the topology bytes mapped through
        the hive's node<N> links; hops/links None where the bytes do not cover the peer."""
        if self.members is None:
            return ()
        out = []
        for index, address in enumerate(self.members):
            if index == self.position:
                continue
            hops = _at(self.num_hops, index)
            out.append((address, None if hops is None else hops & HOPS_MASK,
                        _at(self.num_links, index)))
        return tuple(out)

    def port_peer(self, port: int) -> str | None:
        """The member at the far end of this GPU's `port` (xgmi_port_num), or None."""
        if self.ports is None or self.members is None:
            return None
        for link in self.ports:
            if link.port == port and 1 <= link.peer_position <= len(self.members):
                return self.members[link.peer_position - 1]
        return None


def _at(values: tuple[int, ...] | None, index: int) -> int | None:
    return values[index] if values is not None and index < len(values) else None


def parse_byte_row(text: str, source: str = "<text>") -> tuple[int, ...]:
    """xgmi_num_hops / xgmi_num_links: "41 41 00 41 \\n" -> (0x41, 0x41, 0, 0x41)."""
    line = text[:-1] if text.endswith("\n") else text
    if "\n" in line or not _BYTE_ROW_RE.match(line):
        raise ParseError(source, text, 'not a row of "%02x " bytes')
    values = tuple(int(part, 16) for part in line.split())
    if len(values) > MAX_HIVE_NODES:
        raise ParseError(source, text, f"more than {MAX_HIVE_NODES} hive nodes")
    return values


def parse_port_num(text: str, source: str = "<text>") -> tuple[PortLink, ...]:
    """xgmi_port_num: one "%02x:%02x ->  %02x:%02x" line per link."""
    links = []
    for number, line in enumerate(text.splitlines(), 1):
        match = _PORT_RE.match(line)
        if match is None:
            raise ParseError(f"{source}:{number}", line, 'not "NN:PP ->  NN:PP"')
        links.append(PortLink(*(int(g, 16) for g in match.groups())))
        if len(links) > MAX_HIVE_NODES * 8:
            raise ParseError(source, text[:80], "more links than a hive has")
    return tuple(links)


def _u64(text: str, source: str) -> int:
    return parse_int(text, source)


def read_xgmi(device_dir: Path) -> XgmiReading | None:
    """The XGMI reading of the GPU at `device_dir`, None when it is in no hive."""
    attrs = Collector(device_dir)
    device_id = attrs.get("xgmi_device_id", _u64)
    if device_id is None and not attrs.errors:
        return None
    physical_id = attrs.get("xgmi_physical_id", _u64)
    hive_id = attrs.get("xgmi_hive_info/xgmi_hive_id", _u64)
    members, position, member_errors = _members(device_dir)
    hops = attrs.get("xgmi_num_hops", parse_byte_row)
    links = attrs.get("xgmi_num_links", parse_byte_row)
    ports = attrs.get("xgmi_port_num", parse_port_num)
    return XgmiReading(device_id, physical_id, hive_id, members, position, hops, links, ports,
                       tuple(attrs.errors) + member_errors)


def _members(device_dir: Path) -> tuple[tuple[str, ...] | None, int | None, tuple[str, ...]]:
    """xgmi_hive_info's node<N> links, in N order, as PCI addresses; this GPU's index. Strings
    and os.path.realpath, not pathlib: eight GPUs resolve eight links each on every run
    (bench/bench_preflight.py --host mi300x-hive)."""
    link = os.path.join(device_dir, "xgmi_hive_info")
    hive = os.path.realpath(link)
    try:
        names = os.listdir(hive)
    except FileNotFoundError:
        return None, None, (f"{link}: missing",)
    except OSError as exc:
        return None, None, (f"{hive}: {exc.strerror or exc}",)
    numbered = sorted((int(m.group(1)), name) for name in names if (m := _NODE_RE.match(name)))
    if len(numbered) > MAX_HIVE_NODES:
        return None, None, (f"{hive}: {len(numbered)} node links, more than a hive has",)
    if [n for n, _ in numbered] != list(range(1, len(numbered) + 1)):
        return None, None, (f"{hive}: node links {[n for n, _ in numbered]} are not node1..nodeN",)
    own = os.path.realpath(device_dir)
    members: list[str] = []
    position = None
    for index, (_n, name) in enumerate(numbered):
        node = os.path.join(hive, name)
        target = os.path.realpath(node)
        # sysfs_create_link(): every node<N> is a link to a device directory named by its
        # PCI address
        if not os.path.islink(node) or not os.path.isdir(target) \
                or normalize_pci_address(os.path.basename(target)) is None:
            return None, None, (f"{node}: not a link to a PCI device directory",)
        if target == own:
            position = index
        members.append(os.path.basename(target))
    if position is None:
        return tuple(members), None, (f"{hive}: no node link points at {device_dir.name}",)
    return tuple(members), position, ()
