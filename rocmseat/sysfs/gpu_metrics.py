"""amdgpu's `gpu_metrics`: the SMU firmware's binary metrics table, decoded natively.

The attribute (drivers/gpu/drm/amd/pm/amdgpu_pm.c, amdgpu_get_gpu_metrics) is one of the
`struct gpu_metrics_vX_Y` of drivers/gpu/drm/amd/include/kgd_pp_interface.h, as the firmware
driver filled it: a `struct metrics_table_header` (u16 structure_size, u8 format_revision, u8
content_revision) and then the fields of that revision. Format 1 is the dGPU/Instinct layout
(v1.0 ... v1.8; v1.6 changed in place once, told apart by structure_size), 2 and 3 the APU
layouts (no PCIe fields). The structs are not packed: every field sits at its
natural alignment and the struct is padded to its largest member (the C rules the kernel is
compiled with; tests/sysfs/test_gpu_metrics.py checks this module's offsets against gcc's).
The driver fills the table with 0xff before writing the fields the ASIC provides
(smu_cmn_init_soft_gpu_metrics), so an all-ones field is "not provided", never a value.

Only what rocmseat judges is decoded: the PCIe link (`pcie_link_width` in lanes,
`pcie_link_speed` in 0.1 GT/s) and, from v1.4 (Instinct MI300), the accumulated PCIe error
counters and the xGMI fields: `xgmi_link_width` (lanes), `xgmi_link_speed` (GT/s: "XGMI bus
width and bitrate (in Gbps)" in kgd_pp_interface.h, AMDGPU_METRICS_UNIT_SPEED_1 in format 1.9),
the per-link `xgmi_read_data_acc[8]`/`xgmi_write_data_acc[8]` and, from v1.7 and in format 1.9,
`xgmi_link_status[8]` (AMDGPU_XGMI_LINK_ACTIVE 1, _INACTIVE 0, all-ones where
amdgpu_get_xgmi_link_status() gave no answer: smu_v13_0_6_get_gpu_metrics() writes an entry only
for a link it could read). A revision this module does not know, or a file whose size is not its
header's `structure_size` (or the size of that revision's struct), is a ParseError with the reason:
never a guess at a layout.

Format 1.9 (AMD's amdgpu since 2025-09, the driver ROCm 7 installs: MI300/MI325/MI350 through
smu_v13_0_6_ppt.c, `smu_v13_0_6_gpu_metrics_init(gpu_metrics, 1, 9)`) is no fixed struct but a
self-describing attribute table: `struct gpu_metrics_v1_9 { struct metrics_table_header
common_header; int attr_count; struct gpu_metrics_attr metrics_attrs[]; }` in kgd_pp_interface.h,
laid out on the wire by DECLARE_SMU_METRICS_CLASS (drivers/gpu/drm/amd/pm/swsmu/smu_cmn.h) as a
`__packed` struct: the header, the s32 attr_count, then per attribute a u64 encoding
(AMDGPU_METRICS_ENC_ATTR: unit << 24 | type << 20 | id << 10 | instance count) followed by that
many values of the type, 0xFF-filled first (SMU_METRICS_INIT_SCALAR/_ARRAY), structure_size =
sizeof. parse_attr_table walks it: an id it does not know is skipped by its encoded size, a type
it cannot size, a count that disagrees with attr_count, or a walk that does not end exactly at
structure_size is a ParseError.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocmseat.errors import ParseError
from rocmseat.sysfs.parse import KNOWN_SPEEDS_GTS

_SIZES = {"B": 1, "H": 2, "I": 4, "Q": 8}
_HEADER = (("structure_size", "H", 1), ("format_revision", "B", 1), ("content_revision", "B", 1))

# Field lists of kgd_pp_interface.h, in order: (name, C type code, array length).
_TEMPS_V1 = (("temperature_edge", "H", 1), ("temperature_hotspot", "H", 1),
             ("temperature_mem", "H", 1), ("temperature_vrgfx", "H", 1),
             ("temperature_vrsoc", "H", 1), ("temperature_vrmem", "H", 1),
             ("average_gfx_activity", "H", 1), ("average_umc_activity", "H", 1),
             ("average_mm_activity", "H", 1), ("average_socket_power", "H", 1))
_CLOCKS_V1 = (("average_clocks", "H", 7), ("current_clocks", "H", 7),
              ("throttle_status", "I", 1), ("current_fan_speed", "H", 1))
_V1_1 = (*_HEADER, *_TEMPS_V1, ("energy_accumulator", "Q", 1), ("system_clock_counter", "Q", 1),
         *_CLOCKS_V1, ("pcie_link_width", "H", 1), ("pcie_link_speed", "H", 1),
         ("padding", "H", 1), ("gfx_activity_acc", "I", 1), ("mem_activity_acc", "I", 1),
         ("temperature_hbm", "H", 4))
_V1_2 = (*_V1_1, ("firmware_timestamp", "Q", 1))
_V1_3 = (*_V1_2, ("voltage", "H", 3), ("padding1", "H", 1), ("indep_throttle_status", "Q", 1))


# The runs of fields every Instinct layout (v1.4 ... v1.8) shares, in order.
_INSTINCT_HEAD = (
    *_HEADER, ("temperature_hotspot", "H", 1), ("temperature_mem", "H", 1),
    ("temperature_vrsoc", "H", 1), ("curr_socket_power", "H", 1),
    ("average_gfx_activity", "H", 1), ("average_umc_activity", "H", 1),
)
_INSTINCT_LINKS = (
    ("pcie_link_width", "H", 1), ("pcie_link_speed", "H", 1),
    ("xgmi_link_width", "H", 1), ("xgmi_link_speed", "H", 1),
    ("gfx_activity_acc", "I", 1), ("mem_activity_acc", "I", 1),
    ("pcie_bandwidth_acc", "Q", 1), ("pcie_bandwidth_inst", "Q", 1),
    ("pcie_l0_to_recov_count_acc", "Q", 1), ("pcie_replay_count_acc", "Q", 1),
    ("pcie_replay_rover_count_acc", "Q", 1),
)
_INSTINCT_CLOCKS = (
    ("firmware_timestamp", "Q", 1), ("current_gfxclk", "H", 8), ("current_socclk", "H", 4),
    ("current_vclk0", "H", 4), ("current_dclk0", "H", 4), ("current_uclk", "H", 1),
)


def _instinct(*, jpeg: bool, residency: bool, nak: bool) -> tuple[tuple[str, str, int], ...]:
    """gpu_metrics_v1_4 (MI300), v1_5 (+ jpeg_activity, NAK counters), v1_6 (+ residencies)."""
    return (
        *_INSTINCT_HEAD,
        ("vcn_activity", "H", 4), *((("jpeg_activity", "H", 32),) if jpeg else ()),
        ("energy_accumulator", "Q", 1), ("system_clock_counter", "Q", 1),
        *((("accumulation_counter", "I", 1), ("residency_acc", "I", 5)) if residency else ()),
        ("throttle_status", "I", 1), ("gfxclk_lock_status", "I", 1),
        *_INSTINCT_LINKS,
        *((("pcie_nak_sent_count_acc", "I", 1), ("pcie_nak_rcvd_count_acc", "I", 1))
          if nak else ()),
        ("xgmi_read_data_acc", "Q", 8), ("xgmi_write_data_acc", "Q", 8),
        *_INSTINCT_CLOCKS,
        ("padding", "H", 1),
    )


# struct amdgpu_xcp_metrics (v1.0, 168 bytes), _v1_1 (232) and _v1_2 (440): u32 gfx_busy_inst[8],
# u16 jpeg_busy[32 or 40], u16 vcn_busy[4], then u64 arrays of 8; 8-byte aligned. An array of
# NUM_XCP (8) of them has the layout of that many u64 (the test checks these sizes with gcc).
XCP_STATS_BYTES = {"v1_0": 168, "v1_1": 232, "v1_2": 440}


def _partitioned(*, mem_max: bool, link_status: bool, xcp: str) -> tuple[tuple[str, str, int], ...]:
    """gpu_metrics_v1_6 as kernels since the XCP partition stats lay it out, v1_7, v1_8 (MI300
    and MI350 with partitions): no per-engine activity, per-partition stats at the end."""
    return (
        *_INSTINCT_HEAD,
        *((("mem_max_bandwidth", "Q", 1),) if mem_max else ()),
        ("energy_accumulator", "Q", 1), ("system_clock_counter", "Q", 1),
        ("accumulation_counter", "I", 1), ("residency_acc", "I", 5),
        ("gfxclk_lock_status", "I", 1),
        *_INSTINCT_LINKS,
        ("pcie_nak_sent_count_acc", "I", 1), ("pcie_nak_rcvd_count_acc", "I", 1),
        ("xgmi_read_data_acc", "Q", 8), ("xgmi_write_data_acc", "Q", 8),
        *((("xgmi_link_status", "H", 8), ("padding", "H", 1)) if link_status else ()),
        *_INSTINCT_CLOCKS,
        ("num_partition", "H", 1), ("xcp_stats", "Q", 8 * XCP_STATS_BYTES[xcp] // 8),
        ("pcie_lc_perf_other_end_recovery", "I", 1),
    )


_APU_TEMPS = (("temperature_gfx", "H", 1), ("temperature_soc", "H", 1),
              ("temperature_core", "H", 8), ("temperature_l3", "H", 2),
              ("average_gfx_activity", "H", 1), ("average_mm_activity", "H", 1))
_APU_POWER = (("average_power", "H", 4), ("average_core_power", "H", 8),
              ("average_clocks", "H", 6), ("current_clocks", "H", 6),
              ("current_coreclk", "H", 8), ("current_l3clk", "H", 2),
              ("throttle_status", "I", 1), ("fan_pwm", "H", 1))
_V2_1 = (*_HEADER, *_APU_TEMPS, ("system_clock_counter", "Q", 1), *_APU_POWER,
         ("padding", "H", 3))
_V2_2 = (*_V2_1, ("indep_throttle_status", "Q", 1))
_V2_3 = (*_V2_2, ("average_temperature_gfx", "H", 1), ("average_temperature_soc", "H", 1),
         ("average_temperature_core", "H", 8), ("average_temperature_l3", "H", 2))

Fields = tuple[tuple[str, str, int], ...]
# Per revision, every layout the kernel has published under it: gpu_metrics_v1_6 changed in
# place when the XCP partition stats came (per-engine activity out, xcp_stats and the other end's
# recovery counter in); the header's structure_size says which one a table is.
LAYOUTS: dict[tuple[int, int], tuple[Fields, ...]] = {
    (1, 0): ((*_HEADER, ("system_clock_counter", "Q", 1), *_TEMPS_V1,
              ("energy_accumulator", "I", 1), *_CLOCKS_V1,
              ("pcie_link_width", "B", 1), ("pcie_link_speed", "B", 1)),),
    (1, 1): (_V1_1,),
    (1, 2): (_V1_2,),
    (1, 3): (_V1_3,),
    (1, 4): (_instinct(jpeg=False, residency=False, nak=False),),
    (1, 5): (_instinct(jpeg=True, residency=False, nak=True),),
    (1, 6): (
        _instinct(jpeg=True, residency=True, nak=True),
        _partitioned(mem_max=False, link_status=False, xcp="v1_0"),
    ),
    (1, 7): (_partitioned(mem_max=True, link_status=True, xcp="v1_1"),),
    (1, 8): (_partitioned(mem_max=True, link_status=True, xcp="v1_2"),),
    (2, 0): ((*_HEADER, ("system_clock_counter", "Q", 1), *_APU_TEMPS, *_APU_POWER,
              ("padding", "H", 1)),),
    (2, 1): (_V2_1,),
    (2, 2): (_V2_2,),
    (2, 3): (_V2_3,),
    (2, 4): ((*_V2_3, ("average_voltage", "H", 3), ("average_current", "H", 3)),),
    (3, 0): ((
        *_HEADER, ("temperature_gfx", "H", 1), ("temperature_soc", "H", 1),
        ("temperature_core", "H", 16), ("temperature_skin", "H", 1),
        ("average_gfx_activity", "H", 1), ("average_vcn_activity", "H", 1),
        ("average_ipu_activity", "H", 8), ("average_core_c0_activity", "H", 16),
        ("average_bandwidths", "H", 4), ("system_clock_counter", "Q", 1),
        ("average_socket_power", "I", 1), ("average_ipu_power", "H", 1),
        ("average_apu_power", "I", 1), ("average_gfx_power", "I", 1),
        ("average_dgpu_power", "I", 1), ("average_all_core_power", "I", 1),
        ("average_core_power", "H", 16), ("average_sys_power", "H", 1),
        ("stapm_power_limit", "H", 1), ("current_stapm_power_limit", "H", 1),
        ("average_clocks", "H", 8), ("current_coreclk", "H", 16),
        ("current_core_maxfreq", "H", 1), ("current_gfx_maxfreq", "H", 1),
        ("throttle_residency", "I", 7), ("time_filter_alphavalue", "I", 1),
    ),),
}

# The accumulated PCIe counters (v1.4+), by field: the name rocmseat's aer family gives them.
PCIE_COUNTERS = {
    "pcie_replay_count_acc": "replay",
    "pcie_replay_rover_count_acc": "replay_rollover",
    "pcie_l0_to_recov_count_acc": "l0_to_recovery",
    "pcie_nak_sent_count_acc": "nak_sent",
    "pcie_nak_rcvd_count_acc": "nak_received",
    "pcie_lc_perf_other_end_recovery": "other_end_recovery",  # v1.6 (partitioned) ... v1.8
}


def layout(fields: tuple[tuple[str, str, int], ...]) -> tuple[dict[str, tuple[int, str]], int]:
    """({field: (offset, type code)}, sizeof): the C layout of a non-packed struct."""
    offsets: dict[str, tuple[int, str]] = {}
    offset = 0
    widest = 1
    for name, code, count in fields:
        size = _SIZES[code]
        widest = max(widest, size)
        offset = (offset + size - 1) // size * size
        offsets[name] = (offset, code)
        offset += size * count
    return offsets, (offset + widest - 1) // widest * widest


# revision -> {structure_size: offsets}
_LAYOUTS = {
    rev: {size: offsets for offsets, size in map(layout, variants)}
    for rev, variants in LAYOUTS.items()
}


@dataclass(frozen=True, slots=True)
class GpuMetrics:
    """The fields preflight judges. None: the revision has no such field, or the firmware left
    it all-ones (not provided)."""

    format_revision: int
    content_revision: int
    structure_size_bytes: int
    pcie_link_speed_gts: float | None
    pcie_link_width: int | None
    # why the link fields are not a link (a value that is no PCIe data rate), or None
    link_problem: str | None
    pcie_counters: tuple[tuple[str, int], ...]  # ("replay", n) ... (v1.4+ only)
    xgmi_link_width: int | None = None  # lanes; None: no such field, or not provided
    xgmi_link_speed_gts: int | None = None
    # per xGMI link: 1 active, 0 inactive, None not provided; None: the layout has no such field
    xgmi_link_status: tuple[int | None, ...] | None = None
    xgmi_read_data_acc: tuple[int | None, ...] | None = None
    xgmi_write_data_acc: tuple[int | None, ...] | None = None

    @property
    def revision(self) -> str:
        return f"v{self.format_revision}.{self.content_revision}"

    @property
    def has_pcie_link(self) -> bool:
        return self.format_revision == 1


def _field(data: bytes, offsets: dict[str, tuple[int, str]], name: str) -> int | None:
    if name not in offsets:
        return None
    offset, code = offsets[name]
    size = _SIZES[code]
    value = int.from_bytes(data[offset:offset + size], "little")
    return None if value == (1 << (8 * size)) - 1 else value


def parse_gpu_metrics(data: bytes, source: str = "<bytes>") -> GpuMetrics:
    """The bytes of `gpu_metrics` -> its PCIe fields; ParseError naming what does not fit."""
    if len(data) < 4:
        raise ParseError(source, f"{len(data)} bytes", "shorter than the gpu_metrics header")
    size = int.from_bytes(data[0:2], "little")
    frev, crev = data[2], data[3]
    if (frev, crev) == ATTR_TABLE:
        values = parse_attr_table(data, source)
        return _from_values(frev, crev, size, values, attr_arrays(data, source))
    known = _LAYOUTS.get((frev, crev))
    if known is None:
        raise ParseError(
            source, f"format {frev}, content {crev}",
            f"gpu_metrics v{frev}.{crev} is a layout rocmseat does not know (known: "
            + ", ".join(f"v{f}.{c}" for f, c in (*LAYOUTS, ATTR_TABLE)) + ")",
        )
    offsets = known.get(size)
    if offsets is None:
        sizes = " or ".join(str(n) for n in sorted(known))
        raise ParseError(
            source, f"structure_size {size}",
            f"gpu_metrics v{frev}.{crev} is {sizes} bytes, the header says {size}",
        )
    if len(data) != size:
        raise ParseError(
            source, f"{len(data)} bytes",
            f"gpu_metrics v{frev}.{crev} is {size} bytes, the file holds {len(data)}",
        )
    fields = ("pcie_link_speed", "pcie_link_width", "xgmi_link_width", "xgmi_link_speed",
              *PCIE_COUNTERS)
    arrays = {name: _array(data, offsets, name, count) for name, count in XGMI_ARRAYS.items()
              if name in offsets}
    return _from_values(frev, crev, size, {f: _field(data, offsets, f) for f in fields}, arrays)


# The per-link xGMI arrays (NUM_XGMI_LINKS = 8 in every layout that has them)
XGMI_ARRAYS = {"xgmi_link_status": 8, "xgmi_read_data_acc": 8, "xgmi_write_data_acc": 8}


def _array(data: bytes, offsets: dict[str, tuple[int, str]], name: str,
           count: int) -> tuple[int | None, ...]:
    offset, code = offsets[name]
    size = _SIZES[code]
    return tuple(_cell(data[offset + i * size:offset + (i + 1) * size]) for i in range(count))


def _cell(raw: bytes) -> int | None:
    value = int.from_bytes(raw, "little")
    return None if value == (1 << (8 * len(raw))) - 1 else value


# The lane counts a PCIe link trains to (PCIe Base Spec, Link Capabilities: x1 x2 x4 x8 x12 x16
# x32). Early MI300 kernels wrote a width *level* (6 for x16) into pcie_link_width (fixed by
# amd-gfx "Update PCIE link width format ... smu v13.0.6", 2023-08-12): 6 is no width.
LANE_COUNTS = frozenset({1, 2, 4, 8, 12, 16, 32})


def _from_values(frev: int, crev: int, size: int, values: dict[str, int | None],
                 arrays: dict[str, tuple[int | None, ...]] | None = None) -> GpuMetrics:
    """The judged fields from a decoded table ({field: value or None (not provided)}); the
    speed in 0.1 GT/s (smu_cmn.c link_speed[] = {25, 50, 80, 160, 320, 640})."""
    raw_speed = values.get("pcie_link_speed")
    width = values.get("pcie_link_width")
    speed = None if raw_speed is None else raw_speed / 10
    problem = None
    if raw_speed is not None and speed not in KNOWN_SPEEDS_GTS:
        problem = (
            f"pcie_link_speed {raw_speed} is no PCIe data rate in 0.1 GT/s"
            + (" (some firmware writes a generation index there)" if raw_speed <= 6 else "")
        )
        speed = None
    if width is not None and width not in LANE_COUNTS:
        problem = problem or (
            f"pcie_link_width {width} is no lane count"
            + (" (early MI300 kernels wrote a width level there)" if width <= 7 else "")
        )
        width = None
    counters = tuple(
        (name, value)
        for field, name in PCIE_COUNTERS.items()
        if (value := values.get(field)) is not None
    )
    arrays = arrays or {}
    return GpuMetrics(
        frev, crev, size, speed, width, problem, counters,
        xgmi_link_width=values.get("xgmi_link_width"),
        xgmi_link_speed_gts=values.get("xgmi_link_speed"),
        xgmi_link_status=arrays.get("xgmi_link_status"),
        xgmi_read_data_acc=arrays.get("xgmi_read_data_acc"),
        xgmi_write_data_acc=arrays.get("xgmi_write_data_acc"),
    )


# --- format 1.9: the attribute table -------------------------------------------------------------
ATTR_TABLE = (1, 9)
# enum amdgpu_metrics_attr_type (kgd_pp_interface.h): U8, S8, U16, S16, U32, S32, U64, S64
ATTR_TYPE_BYTES = (1, 1, 2, 2, 4, 4, 8, 8)
# enum amdgpu_metrics_attr_unit: SPEED_1 is GT/s, SPEED_2 0.1 GT/s (PCIE_LINK_SPEED's unit in
# SMU_13_0_6_METRICS_FIELDS, smu_v13_0_6_ppt.h)
UNIT_SPEED_1, UNIT_SPEED_2 = 6, 7
# enum amdgpu_metrics_attr_id (kgd_pp_interface.h, amd-gfx "drm/amd/pm: Add gpu metrics
# definition", v4): only the ids preflight judges. Later kernels append ids (TEMPERATURE_HBM,
# _MID, _AID, _XCD ...) after GFX_BELOW_HOST_LIMIT_TOTAL_ACC (47); these never move.
ATTR_IDS = {
    16: "pcie_link_width",
    17: "pcie_link_speed",
    24: "pcie_l0_to_recov_count_acc",
    25: "pcie_replay_count_acc",
    26: "pcie_replay_rover_count_acc",
    27: "pcie_nak_sent_count_acc",
    28: "pcie_nak_rcvd_count_acc",
    39: "pcie_lc_perf_other_end_recovery",
    18: "xgmi_link_width",
    19: "xgmi_link_speed",
}
# ... and the per-link arrays (every instance read)
ATTR_ARRAY_IDS = {29: "xgmi_read_data_acc", 30: "xgmi_write_data_acc", 31: "xgmi_link_status"}
_ATTR_HEAD_BYTES = 8  # metrics_table_header (4) + int attr_count (4), __packed
_ENC_BYTES = 8  # u64 NAME##_ftype before each attribute's values


@dataclass(frozen=True, slots=True)
class Attr:
    """One decoded attribute encoding (AMDGPU_METRICS_ENC_ATTR) and where its values start."""

    attr_id: int
    type_id: int
    unit: int
    count: int
    offset: int


def decode_encoding(encoding: int) -> tuple[int, int, int, int]:
    """(unit, type, id, count) of AMDGPU_METRICS_ENC_ATTR: unit bits 31..24
    (AMDGPU_METRICS_ATTR_UNIT_MASK), type 23..20, id 19..10, instances 9..0."""
    return (
        (encoding >> 24) & 0xFF, (encoding >> 20) & 0xF, (encoding >> 10) & 0x3FF,
        encoding & 0x3FF,
    )


def walk_attrs(data: bytes, source: str = "<bytes>") -> list[Attr]:
    """Every attribute of a format 1.9 table, in order; ParseError when the walk does not fit
    the header's structure_size, the file's length or attr_count."""
    size = int.from_bytes(data[0:2], "little")
    if len(data) != size:
        raise ParseError(
            source, f"{len(data)} bytes",
            f"gpu_metrics v1.9 says {size} bytes (structure_size), the file holds {len(data)}",
        )
    if size < _ATTR_HEAD_BYTES:
        raise ParseError(source, f"structure_size {size}", "shorter than the v1.9 header")
    count = int.from_bytes(data[4:8], "little", signed=True)
    if not 0 <= count <= (size - _ATTR_HEAD_BYTES) // _ENC_BYTES:
        raise ParseError(source, f"attr_count {count}", "not an attribute count this size holds")
    attrs: list[Attr] = []
    at = _ATTR_HEAD_BYTES
    for index in range(count):
        if at + _ENC_BYTES > size:
            raise ParseError(
                source, f"attribute {index} of {count}", f"ends past structure_size {size}"
            )
        unit, type_id, attr_id, items = decode_encoding(
            int.from_bytes(data[at:at + _ENC_BYTES], "little")
        )
        if type_id >= len(ATTR_TYPE_BYTES):
            raise ParseError(
                source, f"attribute {index} type {type_id}",
                "a value type rocmseat cannot size (enum amdgpu_metrics_attr_type)",
            )
        at += _ENC_BYTES
        attrs.append(Attr(attr_id, type_id, unit, items, at))
        at += ATTR_TYPE_BYTES[type_id] * items
        if at > size:
            raise ParseError(
                source, f"attribute {index} (id {attr_id})",
                f"its values end at byte {at}, past structure_size {size}",
            )
    if at != size:
        raise ParseError(
            source, f"{count} attributes",
            f"end at byte {at}, structure_size is {size}",
        )
    return attrs


def parse_attr_table(data: bytes, source: str = "<bytes>") -> dict[str, int | None]:
    """A format 1.9 table -> {judged field: value, None if all-ones (not provided)}. Unknown ids
    are skipped by their encoded size; the speed is brought to 0.1 GT/s from its unit."""
    values: dict[str, int | None] = {}
    for attr in walk_attrs(data, source):
        name = ATTR_IDS.get(attr.attr_id)
        if name is None or attr.count < 1:
            continue
        width = ATTR_TYPE_BYTES[attr.type_id]
        raw = int.from_bytes(data[attr.offset:attr.offset + width], "little")
        value: int | None = None if raw == (1 << (8 * width)) - 1 else raw
        if value is not None and attr.type_id % 2 == 1:
            value = None if raw >= 1 << (8 * width - 1) else raw  # a negative count is none
        if name == "pcie_link_speed" and value is not None:
            if attr.unit == UNIT_SPEED_1:
                value *= 10
            elif attr.unit != UNIT_SPEED_2:
                raise ParseError(
                    source, f"pcie_link_speed unit {attr.unit}",
                    "not a speed unit (AMDGPU_METRICS_UNIT_SPEED_1/_2)",
                )
        values[name] = value
    return values


def attr_arrays(data: bytes, source: str = "<bytes>") -> dict[str, tuple[int | None, ...]]:
    """A format 1.9 table's per-link xGMI arrays, every instance (all-ones: None)."""
    out: dict[str, tuple[int | None, ...]] = {}
    for attr in walk_attrs(data, source):
        name = ATTR_ARRAY_IDS.get(attr.attr_id)
        if name is None:
            continue
        width = ATTR_TYPE_BYTES[attr.type_id]
        out[name] = tuple(_cell(data[attr.offset + i * width:attr.offset + (i + 1) * width])
                          for i in range(attr.count))
    return out
