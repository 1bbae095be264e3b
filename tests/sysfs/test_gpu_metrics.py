"""gpu_metrics decoded natively: the layouts are C's (checked against gcc), the fixture tables
(tests/fixtures/gpu_metrics, built by build_sysfs_fixtures.py) decode to their fields, and every
shape the kernel never writes is a ParseError with the reason."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmseat.errors import ParseError
from rocmseat.sysfs.amdgpu import read_amdgpu
from rocmseat.sysfs.gpu_metrics import LAYOUTS, XCP_STATS_BYTES, layout, parse_gpu_metrics
from tests.conftest import FIXTURES

TABLES = FIXTURES / "gpu_metrics"
_C_TYPES = {"B": "uint8_t", "H": "uint16_t", "I": "uint32_t", "Q": "uint64_t"}


def _variants():
    for (frev, crev), variants in LAYOUTS.items():
        for index, fields in enumerate(variants):
            yield f"m{frev}_{crev}_{index}", f"{frev}.{crev}/{index}", fields


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_offsets_and_sizes_are_what_gcc_lays_out(tmp_path):
    lines = ["#include <stdio.h>", "#include <stdint.h>", "#include <stddef.h>"]
    # the kernel's per-partition stats, whose arrays the layouts hold as u64 arrays
    lines.append("struct xcp_v1_0 { uint32_t a[8]; uint16_t j[32]; uint16_t v[4]; "
                 "uint64_t b[8]; };")
    lines.append("struct xcp_v1_1 { uint32_t a[8]; uint16_t j[32]; uint16_t v[4]; "
                 "uint64_t b[8]; uint64_t c[8]; };")
    lines.append("struct xcp_v1_2 { uint32_t a[8]; uint16_t j[40]; uint16_t v[4]; "
                 "uint64_t b[8]; uint64_t c[8]; uint64_t d[8]; uint64_t e[8]; uint64_t f[8]; };")
    for tag, _label, fields in _variants():
        members = "".join(
            f"  {_C_TYPES[code]} {name}{f'[{count}]' if count > 1 else ''};\n"
            for name, code, count in fields
        )
        lines.append(f"struct {tag} {{\n{members}}};")
    body = [f'  printf("xcp %s %zu\\n", "{v}", sizeof(struct xcp_{v}));'
            for v in ("v1_0", "v1_1", "v1_2")]
    for tag, label, fields in _variants():
        body.append(f'  printf("{label} size %zu\\n", sizeof(struct {tag}));')
        for name, _code, _count in fields:
            body.append(f'  printf("{label} {name} %zu\\n", offsetof(struct {tag}, {name}));')
    lines.append("int main(void) {\n" + "\n".join(body) + "\n  return 0;\n}")
    source = tmp_path / "layouts.c"
    source.write_text("\n".join(lines) + "\n")
    subprocess.run(["gcc", "-o", str(tmp_path / "layouts"), str(source)], check=True)
    out = subprocess.run([str(tmp_path / "layouts")], check=True, capture_output=True, text=True)
    expected = [f"xcp {v} {n}" for v, n in XCP_STATS_BYTES.items()]
    for _tag, label, fields in _variants():
        offsets, size = layout(fields)
        expected.append(f"{label} size {size}")
        expected += [f"{label} {name} {offsets[name][0]}" for name, _c, _n in fields]
    assert out.stdout.splitlines() == expected


def test_known_sizes():
    # sizeof of the kernel's structs on x86_64 (v1.6 has two layouts over kernel history)
    sizes = {rev: [layout(fields)[1] for fields in variants] for rev, variants in LAYOUTS.items()}
    assert sizes[(1, 3)] == [120]
    assert sizes[(1, 0)] == [80]
    assert sizes[(1, 6)] == [384, 1664]
    assert sizes[(1, 8)] == [3872]  # under a page: amdgpu_get_gpu_metrics caps at PAGE_SIZE - 1


@pytest.mark.parametrize(("name", "counters"), [
    ("v1_6-partitioned.bin", {"replay": 3}),
    ("v1_8-mi350.bin", {"nak_received": 9, "other_end_recovery": 2}),
])
def test_partitioned_layouts(name, counters):
    metrics = parse_gpu_metrics((TABLES / name).read_bytes())
    assert (metrics.pcie_link_speed_gts, metrics.pcie_link_width) == (32.0, 16)
    assert dict(metrics.pcie_counters) == counters


def test_rdna4_v1_3_link():
    metrics = parse_gpu_metrics((TABLES / "v1_3-rdna4.bin").read_bytes())
    assert metrics.revision == "v1.3"
    assert metrics.structure_size_bytes == 120
    assert (metrics.pcie_link_speed_gts, metrics.pcie_link_width) == (16.0, 16)
    assert metrics.pcie_counters == ()  # v1.3 has no PCIe counters
    assert metrics.link_problem is None


def test_mi300x_v1_5_counters():
    metrics = parse_gpu_metrics((TABLES / "v1_5-mi300x.bin").read_bytes())
    assert (metrics.pcie_link_speed_gts, metrics.pcie_link_width) == (32.0, 16)
    assert dict(metrics.pcie_counters) == {
        "replay": 12, "replay_rollover": 1, "l0_to_recovery": 3, "nak_sent": 2, "nak_received": 5,
    }


def test_v1_4_has_no_nak_counters_and_all_ones_is_not_provided():
    metrics = parse_gpu_metrics((TABLES / "v1_4-mi300x.bin").read_bytes())
    # the builder left rollover and L0-to-recovery all-ones: not provided, never 2**64-1
    assert dict(metrics.pcie_counters) == {"replay": 7}


@pytest.mark.parametrize("name", ["v2_4-apu.bin", "v3_0-apu.bin"])
def test_apu_layouts_have_no_pcie_fields(name):
    metrics = parse_gpu_metrics((TABLES / name).read_bytes())
    assert not metrics.has_pcie_link
    assert (metrics.pcie_link_speed_gts, metrics.pcie_link_width) == (None, None)
    assert metrics.pcie_counters == ()


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("v1_3-truncated.bin", "gpu_metrics v1.3 is 120 bytes, the file holds 64"),
        ("v1_3-size-mismatch.bin", "gpu_metrics v1.3 is 120 bytes, the header says 128"),
        ("v1_9-future.bin", "not an attribute count this size holds: 'attr_count -1'"),
        ("v1_9-truncated.bin", "gpu_metrics v1.9 says 1150 bytes (structure_size), the file "
                               "holds 1000"),
    ],
)
def test_refused_tables(name, reason):
    with pytest.raises(ParseError) as caught:
        parse_gpu_metrics((TABLES / name).read_bytes(), name)
    assert reason in caught.value.message
    assert caught.value.message.startswith(name)


@pytest.mark.parametrize("data", [b"", b"\x78", b"\x78\x00\x01"])
def test_shorter_than_a_header(data):
    with pytest.raises(ParseError, match="shorter than the gpu_metrics header"):
        parse_gpu_metrics(data)


def test_a_generation_index_is_not_a_speed():
    metrics = parse_gpu_metrics((TABLES / "v1_3-gen-index.bin").read_bytes())
    assert metrics.pcie_link_speed_gts is None
    assert "generation index" in (metrics.link_problem or "")


def test_read_through_the_attribute_reader(tmp_path):
    device = tmp_path / "0000:00:05.0"
    device.mkdir()
    (device / "gpu_metrics").write_bytes((TABLES / "v1_3-rdna4.bin").read_bytes())
    reading = read_amdgpu(device)
    assert reading.gpu_metrics is not None
    assert reading.gpu_metrics.pcie_link_speed_gts == 16.0
    (device / "gpu_metrics").unlink()
    (device / "gpu_metrics").write_bytes((TABLES / "v1_3-truncated.bin").read_bytes())
    reading = read_amdgpu(device)
    assert reading.gpu_metrics is None
    assert any("the file holds 64" in e for e in reading.errors)


def test_a_fifo_or_a_huge_file_is_unreadable_not_a_hang(tmp_path):
    import os

    device = tmp_path / "d"
    device.mkdir()
    os.mkfifo(device / "gpu_metrics")
    reading = read_amdgpu(device)
    assert reading.gpu_metrics is None
    assert any("FIFO" in e for e in reading.errors)
    (device / "gpu_metrics").unlink()
    (device / "gpu_metrics").write_bytes(b"\xff" * (1 << 17))
    assert any("larger than" in e for e in read_amdgpu(device).errors)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_any_bytes_decode_or_are_a_parse_error(data):
    try:
        metrics = parse_gpu_metrics(data, "gpu_metrics")
    except ParseError as exc:
        assert exc.message.startswith("gpu_metrics: ") and "\n" not in exc.message
        return
    assert metrics.pcie_link_speed_gts is None or metrics.pcie_link_speed_gts in (
        2.5, 5.0, 8.0, 16.0, 32.0, 64.0)
    assert metrics.pcie_link_width is None or 1 <= metrics.pcie_link_width <= 32


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([(rev, i) for rev, vs in sorted(LAYOUTS.items()) for i in range(len(vs))]),
       st.data())
def test_every_layout_round_trips_its_link(variant, data):
    revision, index = variant
    offsets, size = layout(LAYOUTS[revision][index])
    table = bytearray(b"\xff" * size)
    table[0:2] = size.to_bytes(2, "little")
    table[2], table[3] = revision
    # v1.0's u8 pcie_link_speed tops out at 25.5 GT/s (the ASICs of its day were Gen4)
    speeds = [25, 50, 80, 160] if revision == (1, 0) else [25, 50, 80, 160, 320, 640]
    speed = data.draw(st.sampled_from(speeds))
    width = data.draw(st.sampled_from([1, 2, 4, 8, 16]))
    if "pcie_link_speed" in offsets:
        for name, value in (("pcie_link_speed", speed), ("pcie_link_width", width)):
            offset, code = offsets[name]
            n = {"B": 1, "H": 2}[code]
            table[offset:offset + n] = value.to_bytes(n, "little")
    metrics = parse_gpu_metrics(bytes(table))
    if "pcie_link_speed" in offsets:
        assert (metrics.pcie_link_speed_gts, metrics.pcie_link_width) == (speed / 10, width)
    else:
        assert (metrics.pcie_link_speed_gts, metrics.pcie_link_width) == (None, None)


# --- format 1.9: the attribute table (issue 24) --------------------------------------------------
def _builder():
    from tests.sysfs.conftest import fixture_builder

    return fixture_builder()


def test_v1_9_table_is_1150_bytes_for_47_attributes():
    """SMU_13_0_6_METRICS_FIELDS as DECLARE_SMU_METRICS_CLASS packs it: 8 + 47 x 8 encodings +
    766 bytes of values = 1,150 (the figure of the issue, computed from the field list)."""
    builder = _builder()
    fields = builder.SMU_13_0_6_METRICS_FIELDS
    assert len(fields) == 47
    values = sum(builder._ATTR_BYTES[t] * n for _name, _id, t, _unit, n in fields)
    assert (values, 8 + 8 * len(fields) + values) == (766, 1150)
    data = (TABLES / "v1_9-mi300x.bin").read_bytes()
    assert len(data) == 1150 and data[:8] == (1150).to_bytes(2, "little") + b"\x01\x09" + (
        47).to_bytes(4, "little")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_v1_9_size_is_what_gcc_packs(tmp_path):
    """The kernel's struct, as the macros expand it (u64 NAME##_ftype; then the values), compiled
    __packed: sizeof is the fixture's length."""
    builder = _builder()
    ctypes = ("uint8_t", "int8_t", "uint16_t", "int16_t", "uint32_t", "int32_t", "uint64_t",
              "int64_t")
    members = "".join(
        f"  uint64_t {name}_ftype; {ctypes[t]} {name}{f'[{n}]' if n > 1 else ''};\n"
        for name, _id, t, _unit, n in builder.SMU_13_0_6_METRICS_FIELDS
    )
    source = tmp_path / "v19.c"
    source.write_text(
        "#include <stdio.h>\n#include <stdint.h>\n"
        "struct __attribute__((packed)) hdr { uint16_t s; uint8_t f; uint8_t c; };\n"
        "struct __attribute__((packed)) m { struct hdr h; int attr_count;\n" + members + "};\n"
        'int main(void) { printf("%zu\\n", sizeof(struct m)); return 0; }\n'
    )
    subprocess.run(["gcc", "-o", str(tmp_path / "v19"), str(source)], check=True)
    out = subprocess.run([str(tmp_path / "v19")], check=True, capture_output=True, text=True)
    assert int(out.stdout) == len((TABLES / "v1_9-mi300x.bin").read_bytes()) == 1150


def test_v1_9_decodes_link_and_every_pcie_counter():
    metrics = parse_gpu_metrics((TABLES / "v1_9-mi300x.bin").read_bytes())
    assert metrics.revision == "v1.9" and metrics.structure_size_bytes == 1150
    assert (metrics.pcie_link_speed_gts, metrics.pcie_link_width) == (32.0, 16)
    assert dict(metrics.pcie_counters) == {
        "replay": 12, "replay_rollover": 1, "l0_to_recovery": 3, "nak_sent": 2,
        "nak_received": 5, "other_end_recovery": 0,
    }


def test_v1_9_an_unseen_attribute_is_skipped_by_its_encoded_size():
    data = (TABLES / "v1_9-unseen-attr.bin").read_bytes()
    assert len(data) == 1150 + 8 + 16
    metrics = parse_gpu_metrics(data)
    assert (metrics.pcie_link_speed_gts, metrics.pcie_link_width) == (32.0, 16)
    assert dict(metrics.pcie_counters) == {"replay": 4}  # the rest left all-ones: not provided


def test_v1_9_speed_in_gts_units_and_a_foreign_unit():
    builder = _builder()
    fields = list(builder.SMU_13_0_6_METRICS_FIELDS)
    speed = next(i for i, f in enumerate(fields) if f[0] == "pcie_link_speed")
    fields[speed] = ("pcie_link_speed", 17, 2, 6, 1)  # AMDGPU_METRICS_UNIT_SPEED_1: GT/s
    data = builder.attr_table({"pcie_link_speed": 16, "pcie_link_width": 16}, fields=tuple(fields))
    assert parse_gpu_metrics(data).pcie_link_speed_gts == 16.0
    fields[speed] = ("pcie_link_speed", 17, 2, 2, 1)  # TEMP_1: no speed
    with pytest.raises(ParseError, match="not a speed unit"):
        parse_gpu_metrics(builder.attr_table({"pcie_link_speed": 16}, fields=tuple(fields)))


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda d: d[:8] + (9 << 20 | 17 << 10 | 1).to_bytes(8, "little") + d[16:],
     "a value type rocmseat cannot size"),
    (lambda d: d[:4] + (48).to_bytes(4, "little") + d[8:], "ends past structure_size"),
    (lambda d: d[:4] + (200).to_bytes(4, "little") + d[8:], "not an attribute count"),
    (lambda d: d[:4] + (46).to_bytes(4, "little") + d[8:], "end at byte"),
    (lambda d: d[:16] + (2 << 20 | 1023).to_bytes(8, "little") + d[24:], "past structure_size"),
])
def test_v1_9_walk_that_does_not_fit_is_refused(mutate, reason):
    data = (TABLES / "v1_9-mi300x.bin").read_bytes()
    with pytest.raises(ParseError, match=reason):
        parse_gpu_metrics(mutate(data))


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=1200))
def test_v1_9_any_bytes_are_a_table_or_a_parse_error(body):
    data = (len(body) + 4).to_bytes(2, "little")[:2] + b"\x01\x09" + body
    try:
        parse_gpu_metrics(data)
    except ParseError:
        pass


def test_an_early_mi300_width_level_is_no_width():
    """Early MI300 kernels wrote a width level (6 = x16) into pcie_link_width."""
    data = _builder().mi300x_metrics()
    offsets, _size = layout(LAYOUTS[(1, 5)][0])
    at = offsets["pcie_link_width"][0]
    data = data[:at] + (6).to_bytes(2, "little") + data[at + 2:]
    metrics = parse_gpu_metrics(data)
    assert metrics.pcie_link_width is None
    assert "pcie_link_width 6 is no lane count" in (metrics.link_problem or "")
