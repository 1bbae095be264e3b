"""Judge each GPU's PCIe links (family `pcie`): trained vs. supported, and pp_dpm_pcie.

The endpoint of an AMD dGPU reports its internal link (the ASIC's 32 GT/s x16), which is what
`lspci` LnkSta shows; the truth is the link below each non-AMD port on the path
(rocmseat.node.link). A link trained below what both its ends support fails; a link that is
narrow because the slot is (an x8 slot bifurcated with a NIC) is capability-limited, not a fault,
unless an expectations profile says otherwise.
"""

from __future__ import annotations

from rocmseat.findings import Finding, Subject
from rocmseat.node.firmware import dpm_lanes_known, dpm_star_problem
from rocmseat.node.inventory import Gpu, Hop
from rocmseat.node.link import (
    WALKED,
    EffectiveLink,
    LinkTruth,
    PhysicalLink,
    link_errors,
    link_truth,
    physical_links,
)
from rocmseat.sysfs.attrs import errors_of
from rocmseat.sysfs.parse import DpmLevel, format_speed

# amdgpu's pm getters answer EPERM on a runtime-suspended GPU rather than wake it
# (amdgpu_pm.c amdgpu_pm_get_access_if_active(); rocmseat.sysfs.amdgpu): an idle node, not one
# that could not be checked
ASLEEP_WORDS = "GPU in runtime suspend: firmware not read (it wakes when a client opens it)"

ROLE_WORDS = {
    "root-port": "root port",
    "bridge": "bridge",
    "amd-switch-port": "AMD switch port",
    "endpoint": "endpoint",
}


def link_words(speed_gts: float | None, width: int | None) -> str:
    return f"{format_speed(speed_gts)} {'x?' if width is None else f'x{width}'}"


def hop_words(hop: Hop) -> str:
    return f"{ROLE_WORDS.get(hop.role, hop.role)} {hop.address}"


def endpoint_claim(gpu: Gpu) -> str:
    own = gpu.endpoint.link
    return link_words(own.current_speed_gts, own.current_width)


def _endpoint_overclaims(gpu: Gpu, eff: EffectiveLink) -> bool:
    own = gpu.endpoint.link
    if own.current_speed_gts is None or eff.speed_gts is None:
        return False
    return own.current_speed_gts > eff.speed_gts or (own.current_width or 0) > (eff.width or 0)


def _below(link: PhysicalLink) -> bool:
    speed_low = (
        link.trained_speed_gts is not None
        and link.capable_speed_gts is not None
        and link.trained_speed_gts < link.capable_speed_gts
    )
    width_low = (
        link.trained_width is not None
        and link.capable_width is not None
        and 0 < link.trained_width < link.capable_width
    )
    return speed_low or width_low


def _dpm_idle(gpu: Gpu, link: PhysicalLink) -> DpmLevel | None:
    """The active pp_dpm_pcie level if it explains a low link (idle power saving), else None."""
    levels = gpu.amdgpu.pp_dpm_pcie or ()
    if not levels:
        return None
    if not dpm_lanes_known(gpu):
        # smu7's rows carry a speed only (rocmseat.node.firmware): the star names the speed
        fastest = max(lv.speed_gts for lv in levels)
        for level in levels:
            if level.active and level.speed_gts == link.trained_speed_gts and (
                level.speed_gts < fastest
            ):
                return level
        return None
    top = max(levels, key=lambda lv: (lv.speed_gts, lv.width))
    for level in levels:
        if (
            level.active
            and (level.speed_gts, level.width) == (link.trained_speed_gts, link.trained_width)
            and (level.speed_gts, level.width) < (top.speed_gts, top.width)
        ):
            return level
    return None


def judge_link(gpu: Gpu, expected: tuple[float, int] | None = None) -> list[Finding]:
    """`pcie.link.*` findings for one GPU; `expected` = (GT/s, width) from a profile."""
    errors = link_errors(gpu)
    truth = link_truth(gpu)
    eff = truth.walked
    claim = endpoint_claim(gpu)
    data = _link_data(truth, claim)
    if truth.source == "firmware":
        return _judge_from_firmware(gpu, truth, expected, errors, data)
    if truth.source == "none":
        return [_unjudged(gpu, truth, claim, errors, data)]
    it = Subject(gpu.pci_address)
    overclaim = (
        f"; the endpoint claims {claim} (what lspci on {gpu.pci_address} would falsely show)"
        if _endpoint_overclaims(gpu, eff)
        else ""
    )
    findings = _walked_below(gpu, overclaim, data)
    findings += _firmware_below(gpu, truth, data)
    if expected is not None and (eff.speed_gts, eff.width) != expected:
        findings.append(it.fail(
            "pcie.link.expected",
            f"effective link {link_words(eff.speed_gts, eff.width)} at "
            f"{eff.limited_at}; the profile expects {link_words(*expected)}",
            "fix the link, or the profile if the slot changed",
            data,
        ))
    if findings:
        return findings
    where = f"hop {eff.limited_at}"
    root = gpu.root_port
    if root is not None and root.address == eff.limited_at:
        where = hop_words(root)
    note = _capability_note(gpu, eff)
    if expected is not None:
        note += "; as the profile expects"
    return [it.ok("pcie.link.ok",
                  f"{link_words(eff.speed_gts, eff.width)} at {where}{note}{overclaim}", "", data)]


def _link_data(truth: LinkTruth, claim: str) -> dict[str, object]:
    """The data every `pcie.link.*` finding carries: the link as each source reads it."""
    eff = truth.walked
    fw = truth.firmware
    return {
        "effective_speed_gts": truth.speed_gts,
        "effective_width": truth.width,
        "source": truth.source,
        "hierarchy": truth.hierarchy.kind,
        "limited_at": eff.limited_at if truth.source == "walked" else None,
        "capable_speed_gts": eff.capable_speed_gts,
        "capable_width": eff.capable_width,
        "endpoint_claims": claim,
        "firmware_speed_gts": fw.speed_gts,
        "firmware_width": fw.width,
        "firmware_sources": list(fw.sources),
    }


def _unjudged(gpu: Gpu, truth: LinkTruth, claim: str, errors: list[str],
              data: dict[str, object]) -> Finding:
    """No source says the link: asleep behind a hidden hierarchy (ok), else unknown and why."""
    it = Subject(gpu.pci_address)
    fw = truth.firmware
    if gpu.amdgpu.asleep and not errors:
        # the hierarchy is hidden (a VM) and the firmware was not asked: nothing to judge, and
        # nothing wrong either
        return it.ok("pcie.link.asleep",
                     f"{ASLEEP_WORDS}; {truth.hierarchy.why}, so the link is judged when it "
                     f"is awake ({gpu.amdgpu.asleep})", "", data)
    if truth.hierarchy.kind != WALKED and not errors:
        said = fw.problem or (f"not read: {gpu.amdgpu.runtime_error}"
                              if gpu.amdgpu.runtime_error else
                              "no pp_dpm_pcie level and no gpu_metrics link")
        reason = (
            f"{truth.hierarchy.why}, so the endpoint's claim {claim} is not the link, and "
            f"the GPU firmware does not say it ({said})"
        )
    else:
        reason = "; ".join(errors) or f"no link state readable on the path of {gpu.pci_address}"
        if fw.problem:
            reason += f"; the GPU firmware does not say it either ({fw.problem})"
    return it.unknown(
        "pcie.link.unknown",
        f"cannot judge the link: {reason}",
        "check that the sysfs tree is complete and readable; judge the link on the host "
        "(bare metal) where the slot's root port is visible",
        data,
    )


def _walked_below(gpu: Gpu, overclaim: str, data: dict[str, object]) -> list[Finding]:
    """Each physical link on the path trained down (x0), idle at a low DPM level, or below
    what both its ends support."""
    it = Subject(gpu.pci_address)
    findings: list[Finding] = []
    for link in physical_links(gpu):
        if link.trained_width == 0:
            # current_link_width 0: the Negotiated Link Width field is 0, the link did not train
            # (PCIe Base Spec, Link Status register; drivers/pci/pci-sysfs.c prints it as is)
            findings.append(it.fail(
                "pcie.link.down",
                f"{hop_words(link.upstream)} reports its link down (x0) toward "
                f"{link.downstream.address}{overclaim}",
                "the GPU is behind a link that did not train: reseat it and power-cycle",
                data,
            ))
            continue
        if not _below(link):
            continue
        trained = link_words(link.trained_speed_gts, link.trained_width)
        capable = link_words(link.capable_speed_gts, link.capable_width)
        idle = _dpm_idle(gpu, link)
        if idle is not None:
            findings.append(it.warn(
                "pcie.link.idle",
                f"{hop_words(link.upstream)} trained {trained}, at pp_dpm_pcie level "
                f"{idle.index} (idle power saving); both ends support {capable}",
                "judge under load: rocmseat preflight --sample 30 while a job runs",
                data,
            ))
            continue
        findings.append(it.fail(
            "pcie.link.degraded",
            f"{hop_words(link.upstream)} trained {trained}; both ends support {capable}"
            f"{overclaim}",
            "reseat the GPU and its riser/cable, check the slot's BIOS link speed setting, "
            "then power-cycle (a warm reboot keeps a bad training)",
            data,
        ))
    return findings


def _firmware_below(gpu: Gpu, truth: LinkTruth, data: dict[str, object]) -> list[Finding]:
    """The firmware runs the link below the walked one at its top DPM level (or, without a DPM
    table, at all: MI200/MI300's gpu_metrics link is the current one): never ok at the walked
    value. Below the top level it is idle power saving (pcie.link.idle's business)."""
    fw, eff = truth.firmware, truth.walked
    if not fw.known or fw.at_top is False or eff.speed_gts is None or eff.width is None:
        return []
    assert fw.speed_gts is not None and fw.width is not None
    if fw.speed_gts >= eff.speed_gts and fw.width >= eff.width:
        return []
    level = "at its top DPM level" if fw.at_top else "(no DPM levels: its current link)"
    return [
        Subject(gpu.pci_address).fail(
            "pcie.link.firmware_below",
            f"the GPU firmware runs the link at {fw.words()} {level} "
            f"({', '.join(fw.sources)}); hop {eff.limited_at} trained "
            f"{link_words(eff.speed_gts, eff.width)}",
            "the slot trained faster than the GPU uses it: check the SMU's PCIe table "
            "(power_dpm_force_performance_level, firmware version) and the slot's BIOS setting",
            data,
        )
    ]


def _judge_from_firmware(
    gpu: Gpu,
    truth: LinkTruth,
    expected: tuple[float, int] | None,
    errors: list[str],
    data: dict[str, object],
) -> list[Finding]:
    """The hierarchy above the GPU is hidden or emulated, or its link files cannot be read: the
    firmware's link is the verdict, and the endpoint's claim is named as what lspci shows."""
    fw = truth.firmware
    subject = gpu.pci_address
    said = f"{fw.words()} from the GPU firmware ({', '.join(fw.sources)})"
    if errors:
        context = f"; the link files cannot be read ({errors[0]})"
    elif truth.hierarchy.kind == WALKED:
        context = "; the path's link files say no speed or width (the kernel's Unknown)"
    else:
        context = f"; {truth.hierarchy.why}"
        own = gpu.endpoint.link
        if own.current_speed_gts is not None:
            context += f"; the endpoint claims {endpoint_claim(gpu)} (what lspci would show)"
    if fw.at_top is False and fw.top is not None:
        return [
            Subject(subject).warn(
                "pcie.link.idle",
                f"{said}, at pp_dpm_pcie level {fw.active_index} (idle power saving); its top "
                f"level is {fw.top.index} ({link_words(fw.top.speed_gts, fw.top.width)})"
                f"{context}",
                "judge under load: rocmseat preflight --sample 30 while a job runs", data,
            )
        ]
    if expected is not None and (fw.speed_gts, fw.width) != expected:
        return [
            Subject(subject).fail(
                "pcie.link.expected",
                f"{said}; the profile expects {link_words(*expected)}{context}",
                "fix the link, or the profile if the slot changed", data,
            )
        ]
    note = "; as the profile expects" if expected is not None else ""
    return [Subject(subject).ok("pcie.link.ok", f"{said}{note}{context}", "", data)]


def gpu_capability(gpu: Gpu) -> tuple[float | None, int | None]:
    """What the GPU itself supports: the max link of its topmost AMD function (its upstream
    port), which faces the slot."""
    amd = [hop for hop in gpu.path if hop.is_amd]
    top = amd[-1] if amd else gpu.endpoint
    return top.link.max_speed_gts, top.link.max_width


def _capability_note(gpu: Gpu, eff: EffectiveLink) -> str:
    gpu_speed, gpu_width = gpu_capability(gpu)
    narrow = (
        eff.capable_width is not None and gpu_width is not None and eff.capable_width < gpu_width
    )
    slow = (
        eff.capable_speed_gts is not None
        and gpu_speed is not None
        and eff.capable_speed_gts < gpu_speed
    )
    if narrow:
        return (
            f"; the slot is x{eff.capable_width} (the GPU could do x{gpu_width}): "
            "capability-limited by design, not a fault"
        )
    if slow:
        return f"; all the port supports (the GPU could do {format_speed(gpu_speed)})"
    return ""


def judge_dpm(gpu: Gpu) -> list[Finding]:
    """`pcie.dpm.*`: pp_dpm_pcie's active and highest level against the trained link."""
    it = Subject(gpu.pci_address)
    if gpu.amdgpu.runtime_error:
        # never asleep: the PM core refuses every resume until a rebind (rocmseat.sysfs.amdgpu)
        return [it.fail(
            "pcie.dpm.resume_failed",
            f"GPU {gpu.pci_address} failed a runtime resume ({gpu.amdgpu.runtime_error}): the "
            "PM core refuses every later resume (-EINVAL) until the driver is rebound, so the "
            "GPU is unusable, not asleep",
            "see the kernel log for the failure (amdgpu_device_ip_resume failed ...); drain the "
            "node, then rebind amdgpu (or reboot) and re-run preflight",
            {"runtime_status": gpu.amdgpu.runtime_status})]
    if gpu.amdgpu.asleep:
        return [it.ok("pcie.dpm.asleep", f"{ASLEEP_WORDS} ({gpu.amdgpu.asleep})", "",
                      {"asleep": gpu.amdgpu.asleep})]
    dpm_errors = errors_of(gpu.amdgpu.errors, "pp_dpm_pcie")
    if dpm_errors:
        return [it.unknown("pcie.dpm.unknown", f"cannot read pp_dpm_pcie: {dpm_errors[0]}")]
    levels = gpu.amdgpu.pp_dpm_pcie
    if levels is None:
        return [it.ok(
            "pcie.dpm.absent",
            "pp_dpm_pcie not exposed (amdgpu does not create it on MI200/MI300-class "
            "parts); the link is judged from PCI sysfs and gpu_metrics",
        )]
    if not levels:
        return [it.ok("pcie.dpm.empty", "pp_dpm_pcie is empty (the ASIC prints no PCIe levels)")]
    return [_judge_levels(gpu, levels)]


def _judge_levels(gpu: Gpu, levels: tuple[DpmLevel, ...]) -> Finding:
    """A non-empty pp_dpm_pcie table: its highest level against the trained link."""
    it = Subject(gpu.pci_address)
    top = max(levels, key=lambda lv: (lv.speed_gts, lv.width))
    active = [lv for lv in levels if lv.active]
    truth = link_truth(gpu)
    data = {
        "levels": [
            {
                "index": lv.index,
                "speed_gts": lv.speed_gts,
                "width": lv.width,
                "lclk_mhz": lv.lclk_mhz,
                "active": lv.active,
            }
            for lv in levels
        ],
        "highest_index": top.index,
        "active_indexes": [lv.index for lv in active],
    }
    if active:
        act = ", ".join(f"{lv.index} ({link_words(lv.speed_gts, lv.width)})" for lv in active)
        active_text = f"active level {act}"
        if active[0].index == levels[0].index and top.index != levels[0].index:
            active_text += " (idle)"
    else:
        active_text = "no level marked active"
    top_text = f"highest level {top.index} ({link_words(top.speed_gts, top.width)})"
    if (
        truth.speed_gts is not None
        and truth.width is not None
        and (top.speed_gts < truth.speed_gts
             or (dpm_lanes_known(gpu) and top.width < truth.width))
    ):
        return it.warn(
            "pcie.dpm.below_link",
            f"{top_text} is below the trained link "
            f"{link_words(truth.speed_gts, truth.width)}; {active_text}",
            "the GPU will never use the link's full rate: check "
            "power_dpm_force_performance_level and the SMU's PCIe table (firmware)",
            data,
        )
    star_problem = dpm_star_problem(gpu)
    if star_problem is not None:
        return it.unknown(
            "pcie.dpm.unknown",
            f"{star_problem}; highest level {top.index} "
            f"({link_words(top.speed_gts, top.width)}): no active level to judge",
            "read it again under load; a suspended GPU wakes on use",
            data,
        )
    return it.ok("pcie.dpm.ok", f"{active_text}; {top_text}", "", data)
