"""amdgpu's RAS attributes: `<device>/ras/` (drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c,
Documentation/gpu/amdgpu/ras.rst).

- `features`: "feature mask: 0x%x" (amdgpu_ras_sysfs_features_read), the RAS blocks enabled.
- `<block>_err_count` (umc, gfx, sdma, mmhub, xgmi_wafl ...): "ue: %lu\\nce: %lu\\n", the UMC
  block adds "de: %lu" (deferred errors) on newer kernels; "Query currently inaccessible" while
  the GPU is in RAS recovery. The counts are the driver's accumulated totals since it loaded.
- `gpu_vram_bad_pages`: one "0x%08x : 0x%08x : %1s" line (page frame, page size, flag R
  reserved / P pending / F failed to reserve) per retired VRAM page.

Radeon parts have no `ras/` directory: the reading is None (not applicable), never zeros.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rocmseat.errors import ParseError
from rocmseat.sysfs.attrs import Collector, read_parsed
from rocmseat.sysfs.parse import parse_int

_FEATURES_RE = re.compile(r"^feature mask: 0x([0-9a-fA-F]{1,16})\s*$")
_COUNT_RE = re.compile(r"^(ue|ce|de): (\d{1,20})$")
_PAGE_RE = re.compile(r"^0x([0-9a-fA-F]{1,16}) : 0x([0-9a-fA-F]{1,16}) : ([RPF])$")
_BLOCK_RE = re.compile(r"^([a-z0-9_]{1,32})_err_count$")
MAX_BLOCKS = 64
INACCESSIBLE = "Query currently inaccessible"


@dataclass(frozen=True, slots=True)
class RasBlock:
    """One amdgpu RAS block's error counts (`<block>_err_count`)."""

    block: str
    ue: int
    ce: int
    de: int | None  # None: the block does not report deferred errors


@dataclass(frozen=True, slots=True)
class BadPage:
    """One retired page of gpu_vram_bad_pages."""

    pfn: int
    size_bytes: int
    flag: str  # R reserved, P pending, F failed to reserve


@dataclass(frozen=True, slots=True)
class RasReading:
    """A GPU's amdgpu ras/ directory: the feature mask, each block's counts, the retired pages."""

    features_mask: int | None
    blocks: tuple[RasBlock, ...]
    bad_pages: tuple[BadPage, ...] | None  # None: no gpu_vram_bad_pages file
    inaccessible: tuple[str, ...] = ()  # blocks the driver could not query (in recovery)
    errors: tuple[str, ...] = ()

    def counters(self) -> dict[str, int]:
        """`ras.umc.ue` -> count: the form the error windows keep."""
        out: dict[str, int] = {}
        for block in self.blocks:
            out[f"ras.{block.block}.ue"] = block.ue
            out[f"ras.{block.block}.ce"] = block.ce
            if block.de is not None:
                out[f"ras.{block.block}.de"] = block.de
        return out


def parse_features(text: str, source: str = "<text>") -> int:
    match = _FEATURES_RE.match(text.strip())
    if match is None:
        raise ParseError(source, text, "not 'feature mask: 0x...'")
    return int(match.group(1), 16)


def parse_err_count(text: str, source: str = "<text>") -> tuple[int, int, int | None] | None:
    """(ue, ce, de or None); None for "Query currently inaccessible"."""
    if text.strip() == INACCESSIBLE:
        return None
    values: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _COUNT_RE.match(line.strip())
        if match is None or match.group(1) in values:
            raise ParseError(f"{source}:{number}", line, "not 'ue: N', 'ce: N' or 'de: N'")
        values[match.group(1)] = parse_int(match.group(2), f"{source}:{number}")
    if "ue" not in values or "ce" not in values:
        raise ParseError(source, text, "no 'ue:' and 'ce:' lines")
    return values["ue"], values["ce"], values.get("de")


def parse_bad_pages(text: str, source: str = "<text>") -> tuple[BadPage, ...]:
    pages = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _PAGE_RE.match(line.strip())
        if match is None:
            raise ParseError(f"{source}:{number}", line, "not '0xPFN : 0xSIZE : R|P|F'")
        pages.append(BadPage(int(match.group(1), 16), int(match.group(2), 16), match.group(3)))
    return tuple(pages)


def read_ras(device_dir: Path) -> RasReading | None:
    """The GPU's ras/ directory, or None when it has none (not applicable)."""
    ras_dir = device_dir / "ras"
    try:
        names = sorted(os.listdir(ras_dir))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return RasReading(None, (), None, errors=(f"{ras_dir}: {exc.strerror or exc}",))
    if ras_dir.is_symlink():
        return RasReading(None, (), None, errors=(f"{ras_dir}: is a symbolic link",))
    attrs = Collector(ras_dir)
    blocks: list[RasBlock] = []
    inaccessible: list[str] = []
    for name in names:
        match = _BLOCK_RE.match(name)
        if match is None:
            continue
        if len(blocks) + len(inaccessible) >= MAX_BLOCKS:
            attrs.errors.append(f"{ras_dir}: more than {MAX_BLOCKS} RAS blocks")
            break
        value, error = read_parsed(ras_dir / name, parse_err_count)
        if error:
            attrs.errors.append(error)
        elif value is None:
            inaccessible.append(match.group(1))
        else:
            blocks.append(RasBlock(match.group(1), *value))
    return RasReading(
        features_mask=attrs.get("features", parse_features),
        blocks=tuple(blocks),
        bad_pages=attrs.get("gpu_vram_bad_pages", parse_bad_pages),
        inaccessible=tuple(inaccessible),
        errors=tuple(attrs.errors),
    )
