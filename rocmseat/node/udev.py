"""On a live host, enumerate DRM cards through udev (pyudev) and compare with the sysfs reader.

The root-based reader stays the source of truth and the tested path; udev is a second opinion
(it sees the same kernel objects through libudev's database).
"""

from __future__ import annotations

import re
from typing import Any

from rocmseat.findings import NODE, Finding, Subject
from rocmseat.node.inventory import Inventory

_CARD_RE = re.compile(r"^card\d+$")


def udev_card_addresses(context: Any | None = None) -> dict[str, str] | str:
    """card name -> PCI address of its parent, or a one-line reason why udev could not tell."""
    try:
        if context is None:
            import pyudev

            context = pyudev.Context()
        cards = {}
        for device in context.list_devices(subsystem="drm"):
            if not _CARD_RE.match(device.sys_name):
                continue
            parent = device.find_parent("pci")
            if parent is not None:
                cards[str(device.sys_name)] = str(parent.sys_name)
        return cards
    except Exception as exc:  # ImportError, libudev missing, a broken udev database
        return f"udev enumeration failed: {type(exc).__name__}: {exc}"


def compare_udev(inventory: Inventory, cards: dict[str, str] | str) -> list[Finding]:
    if isinstance(cards, str):
        return [NODE.warn("inventory.udev", cards)]
    findings = []
    for gpu in inventory.gpus:
        seen = cards.get(gpu.card or "")
        if seen != gpu.pci_address:
            findings.append(
                Subject(gpu.pci_address).warn(
                    "inventory.udev",
                    f"udev maps {gpu.card} to {seen or 'nothing'}; sysfs to {gpu.pci_address}",
                )
            )
    if not findings:
        findings.append(
            NODE.ok("inventory.udev", f"udev agrees on {len(inventory.gpus)} GPU cards")
        )
    return findings
