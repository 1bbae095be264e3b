"""The library entry of preflight: sysfs root -> inventory -> findings (plus what renders them).

`preflight_report` is the one entry (the CLI, `launch`'s gate and the recorded run call it): the
findings, with the inventory and the pairs the renderers need. Families: pcie, aer, ras, numa,
profile (with a profile), amdsmi (only when asked: amdsmi is optional), hip (only when asked: it
initialises GPUs in child processes).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocmseat.errors import ConfigError, NoDeviceError
from rocmseat.findings import NODE, Finding, Severity, Subject
from rocmseat.node.inventory import Gpu, Inventory, read_inventory
from rocmseat.preflight.aer import AerThresholds, judge_aer, snapshot, unknown_sources
from rocmseat.preflight.bar import cite_small_bar, judge_bar, small_bar_gpus
from rocmseat.preflight.link import judge_dpm, judge_link
from rocmseat.preflight.numa import judge_locality, judge_proposed, judge_requested
from rocmseat.preflight.pairs import Pair, propose_pairs
from rocmseat.preflight.windows import (
    Entry,
    Stamp,
    Window,
    load_ring,
    save_readings,
    window_for,
    window_words,
)
from rocmseat.sysfs.fs import default_kmsg_path, default_proc_root, is_live_root
from rocmseat.sysfs.host import NO_PROC, BootIdentity, read_boot_identity, read_uptime_s

if TYPE_CHECKING:
    # profile.py brings tomllib: imported only when a profile is given (start-up budget)
    from rocmseat.preflight.profile import Profile

FAMILIES = ("pcie", "aer", "ras", "numa", "profile", "amdsmi", "hip", "events", "xgmi")
# events runs by default where there is a kernel log to read (rocmseat.preflight.events); xgmi
# where a GPU is in an XGMI hive or the profile expects one (rocmseat.preflight.xgmi)
DEFAULT_FAMILIES = frozenset({"pcie", "aer", "ras", "numa", "profile", "events", "xgmi"})


@dataclass(frozen=True, slots=True)
class PreflightReport:
    inventory: Inventory
    checked: tuple[Gpu, ...]  # the GPUs judged (all, or those of --pair)
    proposed: tuple[Pair, ...]
    requested: tuple[tuple[str, str], ...]
    findings: tuple[Finding, ...]
    aer_window: str | None
    profile: str | None
    families: tuple[str, ...] = ()  # the families that ran
    full: bool = False  # every default family on every GPU: the node's verdict
    profile_sha256: str | None = None
    identity: BootIdentity = NO_PROC  # this boot (rocmseat.sysfs.host)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class PreflightOptions:
    """What one run checks, and how (each default is the CLI's).

    `proc_root` is where this boot's id is read (None: the default for the sysfs root,
    rocmseat.sysfs.fs.default_proc_root). `kernel_log` is the log the events family reads
    (None: rocmseat.sysfs.fs.default_kmsg_path; a default run on a tree with no kernel log of
    its own skips the family, an asked-for one says unknown), read to its end within
    `kernel_log_timeout_s` (a pipe still open then is unknown). The node's own log (no
    `kernel_log`) is merged with this boot's kept events (rocmseat.preflight.boot_events).
    """

    families: Collection[str] | None = None
    pairs: Sequence[tuple[str, str]] | None = None
    profile: Path | Profile | None = None
    hip: bool = False
    hip_env: Mapping[str, str] | None = None
    hip_library: Path | None = None
    hip_stage_timeout_s: float = 30.0
    amdsmi: bool | None = None
    sample_s: float | None = None
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], str] = _now
    proc_root: Path | None = None
    kernel_log: Path | None = None
    kernel_log_timeout_s: float | None = None  # None: rocmseat.sysfs.kmsg.READ_BUDGET_S


def preflight_report(
    sysfs_root: Path, state_dir: Path, options: PreflightOptions | None = None
) -> PreflightReport:
    """Raises NoDeviceError when the root has no amdgpu device, ConfigError on a bad profile."""
    opts = options if options is not None else PreflightOptions()
    loaded = _load_profile(opts.profile)
    live = is_live_root(sysfs_root)
    kmsg = opts.kernel_log if opts.kernel_log is not None else default_kmsg_path(sysfs_root)
    selected = _select_families(opts, loaded, kmsg)
    inventory = _read_node(sysfs_root)
    if not opts.families and "xgmi" in selected and not _hive_expected(inventory, loaded):
        selected.discard("xgmi")
    proc = opts.proc_root if opts.proc_root is not None else default_proc_root(sysfs_root)
    identity = read_boot_identity(proc)
    requested = tuple(opts.pairs or ())
    if not requested and loaded is not None and "numa" in selected:
        requested = loaded.pairs
    wanted = {a for pair in (opts.pairs or ()) for a in pair}
    checked = tuple(g for g in inventory.gpus if not wanted or g.pci_address in wanted)
    findings: list[Finding] = _inventory_findings(inventory, wanted, live)
    findings += _identity_findings(checked)
    findings += _gpu_findings(checked, inventory, selected, loaded)
    proposed = propose_pairs(inventory)
    if "numa" in selected:
        findings += (judge_requested(requested, inventory) if requested
                     else judge_proposed(proposed, inventory))
    if "profile" in selected and loaded is not None:
        from rocmseat.preflight.profile import judge_profile

        findings += judge_profile(inventory, loaded, wanted)
    window = None
    if "aer" in selected or "ras" in selected:
        thresholds = loaded.thresholds if loaded is not None else AerThresholds()
        error_findings, window = _error_windows(
            _Roots(sysfs_root, state_dir, proc, identity), checked, thresholds, selected, opts)
        findings += error_findings
    if "events" in selected:
        own = opts.kernel_log is None  # the node's own log: this boot's, kept across runs
        keep = (state_dir, sysfs_root, identity.boot_id) if own and identity.boot_id else None
        findings += _events(kmsg, inventory.gpus, checked, loaded, live=live and own,
                            keep=keep, budget_s=opts.kernel_log_timeout_s)
    if "xgmi" in selected:
        findings += _xgmi(inventory, checked, loaded, wanted)
    if "amdsmi" in selected:
        from rocmseat.node.amdsmi_check import amdsmi_findings

        findings += amdsmi_findings(inventory)
    if "hip" in selected:
        hip_pairs = list(opts.pairs) if opts.pairs else [p.addresses() for p in proposed]
        findings += _hip(hip_pairs, opts.hip_env, opts.hip_library, opts.hip_stage_timeout_s)
        findings = cite_small_bar(findings, small_bar_gpus(checked))
    return PreflightReport(
        inventory=inventory,
        checked=checked,
        proposed=proposed,
        requested=requested,
        findings=tuple(findings),
        aer_window=window,
        profile=loaded.name if loaded is not None else None,
        families=tuple(sorted(f for f in selected if f != "profile" or loaded is not None)),
        full=not opts.families and not opts.pairs,
        profile_sha256=loaded.sha256 if loaded is not None else None,
        identity=identity,
    )


def _load_profile(profile: Path | Profile | None) -> Profile | None:
    if isinstance(profile, Path):
        from rocmseat.preflight.profile import load_profile

        return load_profile(profile)
    return profile


def _select_families(opts: PreflightOptions, loaded: Profile | None,
                     kmsg: Path | None) -> set[str]:
    """The families this run judges: those asked for, else the defaults (plus hip and amdsmi
    when asked; events only where there is a kernel log). ConfigError on a bad request."""
    families = opts.families
    selected = set(families) if families else set(DEFAULT_FAMILIES)
    if not families:
        if opts.hip:
            selected.add("hip")
        # amdsmi is an optional dependency (docs/architecture.md "Dependencies"): cross-check
        # only when asked, so a node
        # without it is not "could not check" on every run (the ExecStartPre of every replica).
        if opts.amdsmi:
            selected.add("amdsmi")
        if kmsg is None:
            selected.discard("events")
    unknown = selected - set(FAMILIES)
    if unknown:
        raise ConfigError(f"unknown check family {sorted(unknown)[0]!r} (one of {FAMILIES})")
    if families and "profile" in selected and loaded is None:
        # Asked for, it must run: an empty family would be a silent pass.
        raise ConfigError("the profile family needs an expectations profile (--profile FILE)")
    return selected


def _read_node(sysfs_root: Path) -> Inventory:
    """The inventory, or NoDeviceError saying why there is none."""
    if not sysfs_root.is_dir():
        # a mistyped --sysfs-root / ROCMSEAT_SYSFS_ROOT: say so, not "no amdgpu device"
        raise NoDeviceError(f"{sysfs_root}: no such directory (the sysfs root to read)")
    inventory = read_inventory(sysfs_root)
    if not inventory.gpus:
        others = f" (found {', '.join(inventory.other_cards)})" if inventory.other_cards else ""
        problems = f" ({'; '.join(inventory.problems)})" if inventory.problems else ""
        raise NoDeviceError(
            f"no amdgpu device under {sysfs_root / 'class' / 'drm'}{others}{problems}"
        )
    return inventory


def _gpu_findings(checked: tuple[Gpu, ...], inventory: Inventory, selected: set[str],
                  loaded: Profile | None) -> list[Finding]:
    """The per-GPU sysfs families: pcie (link, DPM, BAR) and numa (locality)."""
    findings: list[Finding] = []
    for gpu in checked:
        if "pcie" in selected:
            expected = loaded.expected_link(gpu.pci_address) if loaded is not None else None
            findings += judge_link(gpu, expected)
            findings += judge_dpm(gpu)
            findings += judge_bar(gpu)
        if "numa" in selected:
            findings += judge_locality(gpu, inventory)
    return findings


def _inventory_findings(inventory: Inventory, wanted: set[str], live: bool) -> list[Finding]:
    findings = [
        Subject(problem.split(":", 1)[0]).unknown(
            "inventory.card", f"cannot read DRM card: {problem}",
            "a card without its device link: driver unbinding or a broken tree",
        )
        for problem in inventory.problems
    ]
    if not wanted:
        findings += _kfd_findings(inventory)
    present = {g.pci_address for g in inventory.gpus}
    for address in sorted(wanted - present):
        findings.append(
            Subject(address).fail(
                "inventory.gpu_missing", f"no amdgpu device at {address}",
                "check the address, or dmesg for a GPU that fell off",
            )
        )
    if live:
        from rocmseat.node.udev import compare_udev, udev_card_addresses

        findings += compare_udev(inventory, udev_card_addresses())
    return findings


def _kfd_findings(inventory: Inventory) -> list[Finding]:
    """A GPU KFD lists with no DRM card, or a KFD topology nobody could read: the run cannot
    count the node's GPUs, so it says so (never "4 GPUs, ok" over a fifth it cannot see)."""
    findings = [
        Subject(address).unknown(
            "inventory.kfd_only",
            f"GPU {address} is listed by KFD (class/kfd topology) but has no DRM card: it "
            "cannot be checked",
            "its DRM device is gone (driver unbound, GPU fell off the bus?): check dmesg and "
            "class/drm under the sysfs mount",
        )
        for address in inventory.kfd_only
    ]
    if inventory.kfd_errors:
        more = len(inventory.kfd_errors) - 1
        findings.append(
            NODE.unknown(
                "inventory.kfd",
                f"cannot read the KFD topology: {inventory.kfd_errors[0]}"
                + (f" (and {more} more)" if more else "")
                + "; a GPU listed only there would go unseen",
                "check class/kfd/kfd/topology/nodes/*/properties",
                {"errors": list(inventory.kfd_errors)},
            )
        )
    return findings


def _identity_findings(gpus: tuple[Gpu, ...]) -> list[Finding]:
    findings = []
    for gpu in gpus:
        if not gpu.identity_errors:
            continue
        more = len(gpu.identity_errors) - 1
        findings.append(
            Subject(gpu.pci_address).unknown(
                "inventory.gpu.identity",
                f"cannot read the GPU's identity: {gpu.identity_errors[0]}"
                + (f" (and {more} more)" if more else ""),
                "kept as a GPU (bound to amdgpu or listed by KFD); check the sysfs tree",
                {"errors": list(gpu.identity_errors)},
            )
        )
    return findings


@dataclass(frozen=True, slots=True)
class _Roots:
    """Where one run reads (the sysfs and proc roots) and keeps its error readings (the state
    dir), and the boot it runs in."""

    sysfs_root: Path
    state_dir: Path
    proc_root: Path | None  # None: a tree with no boot of its own (default_proc_root)
    identity: BootIdentity


def _error_windows(
    roots: _Roots,
    gpus: tuple[Gpu, ...],
    thresholds: AerThresholds,
    families: Collection[str],
    opts: PreflightOptions,
) -> tuple[list[Finding], str]:
    """AER and RAS findings over the error window (rocmseat.preflight.windows): the fixed span
    every run judges, whoever looked; a `--sample` judges its own two readings (`opts.sample_s`,
    slept with `opts.sleep`; `opts.now` stamps a reading)."""
    sysfs_root, state_dir, identity = roots.sysfs_root, roots.state_dir, roots.identity
    sample_s, now = opts.sample_s, opts.now
    findings: list[Finding] = []
    current = snapshot(gpus)
    windows: dict[str, Window] = {}
    stamp: Stamp | None = None  # set when this run's reading joins the error readings
    stored: Mapping[str, tuple[Entry, ...]] = {}
    if sample_s is not None:
        gpus, current, windows, window = _sample(sysfs_root, gpus, current, sample_s,
                                                 opts.sleep, findings=findings)
    elif identity.error is not None:
        # readings from another boot would hide errors counted since this one: never guess
        window = "since boot"
        findings.append(NODE.warn("aer.window",
                                  f"cannot tell this boot ({identity.error}); counting since boot",
                                  "check the proc root (ROCMSEAT_PROC_ROOT)"))
    else:
        loaded = load_ring(state_dir, sysfs_root, identity.boot_id)
        if loaded.problem:
            findings.append(NODE.finding(
                "aer.window",
                Severity.UNKNOWN if loaded.untrusted else Severity.WARN,
                f"{loaded.problem}; counting since boot",
                "the state dir and its files must be owned by root or this user and "
                "writable by no one else" if loaded.untrusted
                else "remove the file; the next run writes a fresh one",
            ))
        stamp = None if loaded.untrusted else _stamp(now, roots.proc_root, findings)
        stored = loaded.ring.devices if loaded.ring is not None else {}
        windows, window = _ring_windows(stored, current, stamp or Stamp(now()), thresholds)
    for gpu in gpus:
        if "aer" in families:
            findings += judge_aer(gpu, current, windows, thresholds)
        if "ras" in families:
            from rocmseat.preflight.ras import judge_ras

            findings += judge_ras(gpu, current, windows, thresholds)
    if stamp is None:
        # a sample judges its own two readings; an unknown boot or an untrusted file is never
        # overwritten
        return findings, window
    problem = save_readings(state_dir, sysfs_root, identity.boot_id, current, stamp,
                            seen=stored, unknown=unknown_sources(gpus))
    if problem:
        findings.append(NODE.warn("aer.window", problem,
                                  "pass --state-dir to a writable directory"))
    return findings, window


def _sample(
    sysfs_root: Path, gpus: tuple[Gpu, ...], first: dict[str, dict[str, int]], sample_s: float,
    sleep: Callable[[float], None], *, findings: list[Finding],
) -> tuple[tuple[Gpu, ...], dict[str, dict[str, int]], dict[str, Window], str]:
    """`--sample`: read again after `sample_s`; the first reading opens each device's window.
    A GPU gone meanwhile is a failure (appended to `findings`)."""
    sleep(sample_s)
    addresses = {g.pci_address for g in gpus}
    again = read_inventory(sysfs_root)
    gpus = tuple(g for g in again.gpus if g.pci_address in addresses)
    window = f"during the {sample_s:g} s sample"
    windows = {address: Window(counters, window) for address, counters in first.items()}
    for address in sorted(addresses - {g.pci_address for g in gpus}):
        findings.append(Subject(address).fail(
            "inventory.gpu_lost",
            f"GPU {address} disappeared {window} (its DRM card or PCI function is gone)",
            "check dmesg for amdgpu/PCIe errors: the GPU fell off the bus or was reset",
        ))
    return gpus, snapshot(gpus), windows, window


def _ring_windows(
    stored: Mapping[str, tuple[Entry, ...]], current: Mapping[str, Mapping[str, int]], at: Stamp,
    thresholds: AerThresholds,
) -> tuple[dict[str, Window], str]:
    """Each device's window from the stored readings, and the phrase that names them."""
    windows = {
        address: window_for(stored.get(address, ()), at, thresholds.window_s)
        for address in current
    }
    phrases = sorted({w.phrase for w in windows.values()})
    window = phrases[0] if len(phrases) == 1 else (
        f"the last {window_words(thresholds.window_s)} (each device's own start: see its "
        "findings)"
    )
    return windows, window


def _stamp(now: Callable[[], str], proc_root: Path | None, findings: list[Finding]) -> Stamp:
    """This reading's time: the wall clock, and the boot clock (`<proc>/uptime`) beside it; a
    proc root whose uptime cannot be read leaves the window on the wall clock, and says so."""
    boot_s, error = read_uptime_s(proc_root)
    if error is not None:
        findings.append(NODE.warn(
            "aer.window",
            f"cannot read the boot clock ({error}); the window is measured on the wall clock",
            "check the proc root (ROCMSEAT_PROC_ROOT)",
        ))
    return Stamp(now(), boot_s)


def _events(kmsg: Path | None, gpus: tuple[Gpu, ...], checked: tuple[Gpu, ...],
            profile: Profile | None, *, live: bool, keep: tuple[Path, Path, str] | None,
            budget_s: float | None) -> list[Finding]:
    """The kernel log's findings (rocmseat.preflight.events); `keep`: (state dir, sysfs root,
    boot id) where this boot's events are kept (rocmseat.preflight.boot_events)."""
    from rocmseat.preflight.events import EventThresholds, judge_events, read_kernel_events
    from rocmseat.sysfs.fs import Unreadable
    from rocmseat.sysfs.kmsg import READ_BUDGET_S

    if kmsg is None:
        return [NODE.unknown(
            "events.source", "no kernel log for a sysfs tree that is not this host's",
            "pass --kernel-log FILE or set ROCMSEAT_KMSG",
        )]
    thresholds = profile.events if profile is not None else EventThresholds()
    only = {g.pci_address for g in checked} if len(checked) < len(gpus) else None
    events = read_kernel_events(kmsg, gpus, live=live,
                                budget_s=READ_BUDGET_S if budget_s is None else budget_s)
    said: list[Finding] = []
    if keep is not None and not isinstance(events, Unreadable):
        from rocmseat.preflight.boot_events import remember

        events, said = remember(*keep, events)
    return said + judge_events(events, gpus, thresholds, only=only)


def _hive_expected(inventory: Inventory, profile: Profile | None) -> bool:
    return (profile is not None and profile.xgmi.hive_members is not None) or any(
        g.amdgpu.xgmi is not None for g in inventory.gpus)


def _xgmi(inventory: Inventory, checked: tuple[Gpu, ...],
          profile: Profile | None, wanted: set[str]) -> list[Finding]:
    """The xgmi family (rocmseat.preflight.xgmi); asked for on a node with no hive: unknown on
    Instinct GPUs (a hive may have failed to form), not applicable elsewhere."""
    from rocmseat.preflight.xgmi import NO_EXPECTATIONS, judge_xgmi

    expected = profile.xgmi if profile is not None else NO_EXPECTATIONS
    if not _hive_expected(inventory, profile):
        from rocmseat.preflight.aer import is_instinct

        if any(is_instinct(g) for g in checked):
            return [NODE.unknown("xgmi.hive", "no GPU of this node is in an XGMI hive: no "
                                 "xgmi_* files to judge", "check dmesg for \"XGMI:\" lines")]
        return [NODE.ok("xgmi.hive", "no XGMI hive on this node (not applicable)")]
    return judge_xgmi(inventory, checked, expected, scope=wanted or None)


def _hip(
    pairs: list[tuple[str, str]],
    env: Mapping[str, str] | None,
    library: Path | None,
    stage_timeout_s: float,
) -> list[Finding]:
    try:
        from rocmseat.hip.check import hip_findings
    except ImportError as exc:
        return [
            NODE.unknown(
                "hip.runtime", f"the HIP probe module is unavailable ({exc})",
                "install rocmseat with its hip package",
            )
        ]
    return list(hip_findings(pairs, env=env, stage_timeout_s=stage_timeout_s, library=library))
