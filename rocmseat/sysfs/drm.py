"""DRM cards under `class/drm`: `cardN` symlinks, enumerated by numeric suffix.

Render nodes (renderD128) and connectors (card1-DP-1) are skipped; cards are not numbered
0..n-1 (a MI300X node showed card1, card9, ... card57), so never glob card[0-9].
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rocmseat.sysfs.attrs import resolve_link

_CARD_RE = re.compile(r"^card(\d{1,6})$")


@dataclass(frozen=True, slots=True)
class Card:
    """One class/drm/cardN entry and the PCI function its `device` link names."""

    name: str  # "card9"
    index: int
    device_dir: Path | None  # the PCI function, None when `device` is missing or dangling
    error: str | None = None


def list_cards(sysfs_root: Path) -> tuple[Card, ...]:
    drm = sysfs_root / "class" / "drm"
    try:
        names = [entry.name for entry in drm.iterdir()]
    except FileNotFoundError:
        return ()
    except OSError as exc:
        return (Card("class/drm", -1, None, f"{drm}: {exc.strerror or exc}"),)
    cards = []
    for name in names:
        match = _CARD_RE.match(name)
        if match is None:
            continue  # renderD*, card1-DP-1 connectors, version
        device_dir, error = resolve_link(drm / name / "device")
        cards.append(Card(name, int(match.group(1)), device_dir, error))
    return tuple(sorted(cards, key=lambda card: card.index))


def render_node_device(sysfs_root: Path, minor: int) -> tuple[Path | None, str | None]:
    """The PCI function `class/drm/renderD<minor>/device` leads to (drm_sysfs.c makes the
    render minor a child of its device), or why it does not."""
    return resolve_link(sysfs_root / "class" / "drm" / f"renderD{minor}" / "device")
