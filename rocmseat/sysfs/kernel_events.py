"""The catalogue of kernel-log event classes: amdgpu's own voice and the PCIe AER driver's.

Each class names the upstream function or format string its lines come from (Linux
`drivers/gpu/drm/amd/...` and `drivers/pci/...`, read at the versions cited; the corpus under
tests/fixtures/kernel-log/ holds real lines from public bug reports for most classes). A line
that matches no class is not an event: the driver's initialisation chatter ("ring gfx_0.0.0
uses VM inv eng 0 on hub 0", "SMU is resumed successfully!") is never a finding.

`severity` is the class's role in the judge (rocmseat.preflight.events):
- `fatal`: fails whatever the count (a reset that failed, a device lost, uncorrectable RAS, an
  AER fatal error, a GPU that failed init);
- `threshold`: fails at the profile's threshold, warns below it (GPU reset, ring timeout);
- `warn`: warns (page faults are usually one process's bug; firmware complaints);
- `count`: counted in the textfile and the JSON, never a finding by itself (a reset that
  succeeded: its `gpu_reset` is the finding; AER corrected errors: the aer family judges their
  rate from the counters).

Pure: text in, values out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EventClass:
    name: str
    severity: str  # fatal | threshold | warn | count
    title: str  # what the class says, in words
    upstream: str  # the function or format string it comes from
    pattern: re.Pattern[str]
    hints: tuple[str, ...]  # literal words every match holds one of (a fast pre-filter)


_HINTS = {
    "ring_soft_recovered": ("soft recovered",),
    "ring_timeout": ("timeout, signaled",),
    "gpu_reset_failed": ("GPU reset", "GPU Recovery"),
    "gpu_reset": ("GPU reset begin",),
    "gpu_reset_ok": ("GPU reset succeeded",),
    "device_lost": ("lost from bus",),
    "init_failed": ("Fatal error during",),
    "mes_failure": ("MES failed", "MES("),
    "page_fault": ("page fault",),
    "kfd_preemption": ("preemption", "Failed to evict"),
    "ras_uncorrectable": ("uncorrectable hardware error",),
    "ras_correctable": (" correctable hardware errors",),
    "ras_poison": ("oison",),
    "ras_bad_page": ("EEPROM",),
    "ras_threshold": ("RAS records",),
    "smu_failure": ("SMU:", "SMU may", "SMU metrics", "no response", "smu features"),
    "psp_failure": ("PSP firmware", "PSP create", "PSP resume failed", "psp firmware",
                    "psp gfx command"),
    "aer_fatal": ("PCIe Bus Error",),
    "aer_nonfatal": ("PCIe Bus Error",),
    "aer_corrected": ("PCIe Bus Error",),
    "pcie_recovery_failed": ("evice recovery failed",),
    "link_down": ("Link Down", "DPC", "link has been reset"),
}


def _c(name: str, severity: str, title: str, upstream: str, pattern: str) -> EventClass:
    return EventClass(name, severity, title, upstream, re.compile(pattern), _HINTS[name])


# Order matters only where two patterns could meet one line: the more specific first.
CATALOGUE: tuple[EventClass, ...] = (
    _c("ring_soft_recovered", "warn", "ring timeout, soft recovered",
       'amdgpu_job.c amdgpu_job_timedout(): "ring %s timeout, but soft recovered"',
       r"\bring (?P<ring>\S+) timeout, but soft recovered"),
    _c("ring_timeout", "threshold", "ring timeout",
       'amdgpu_job.c amdgpu_job_timedout(): "ring %s timeout, signaled seq=%u, emitted seq=%u"',
       r"\bring (?P<ring>\S+) timeout, signaled seq=\d+, emitted seq=\d+"),
    _c("gpu_reset_failed", "fatal", "GPU reset failed",
       'amdgpu_device.c amdgpu_device_gpu_recover(): "GPU reset(%d) failed", '
       '"GPU reset end with ret = %d" (negative); amdgpu_job.c: "GPU Recovery Failed: %d"',
       r"GPU reset\(\d+\) failed|GPU reset end with ret = -\d+|GPU Recovery Failed: -?\d+"),
    _c("gpu_reset", "threshold", "GPU reset",
       'amdgpu_device.c amdgpu_device_gpu_recover(): "GPU reset begin!"',
       r"\bGPU reset begin!"),
    _c("gpu_reset_ok", "count", "GPU reset succeeded",
       'amdgpu_device.c amdgpu_do_asic_reset(): "GPU reset succeeded, trying to resume"',
       r"\bGPU reset succeeded, trying to resume"),
    _c("device_lost", "fatal", "device lost from the bus",
       'amdgpu_device.c amdgpu_device_health_check(): "device lost from bus!"',
       r"\bdevice lost from bus!"),
    _c("init_failed", "fatal", "GPU failed to initialise",
       'amdgpu_drv.c amdgpu_pci_probe() / amdgpu_device_init(): "Fatal error during GPU init"',
       r"\bFatal error during GPU init\b"),
    _c("mes_failure", "warn", "MES firmware did not respond",
       'mes_v11_0.c / mes_v12_0.c mes_v1x_0_submit_pkt_and_poll_completion(): '
       '"MES failed to respond to msg=%s" (older: "MES failed to response msg=%d")',
       r"\bMES(?:\(\d+\))? failed to respond(?: to)? msg=(?P<detail>\w+)"
       r"|\bMES failed to response msg=(?P<detail2>\w+)"),
    _c("page_fault", "warn", "GPU VM page fault",
       'gmc_v9_0.c gmc_v9_0_process_interrupt(), gmc_v10_0.c, gmc_v11_0.c: '
       '"[%s] %spage fault (src_id:%u ring:%u vmid:%u pasid:%u"',
       r"\[(?P<detail>\w+)\] (?:no-retry |retry )?(?:VMC )?page fault \(src_id:\d+ "
       r"ring:(?P<ring>\d+) vmid:\d+ pas_?id:\d+"),
    _c("kfd_preemption", "warn", "KFD queue preemption failed (HWS hang)",
       'kfd_device_queue_manager.c unmap_queues_cpsch(): "The cp might be in an unrecoverable '
       'state due to an unsuccessful queues preemption" (kfd_hws_hang() schedules a reset); '
       'kfd_mqd_manager / amdgpu_amdkfd_gfx: "Queue preemption time out", "preemption failed"; '
       'kfd_process.c: "Failed to evict process queues"',
       r"unsuccessful queues preemption|Queue preemption time out|\bpreemption failed"
       r"|Failed to evict process queues"),
    _c("ras_uncorrectable", "fatal", "uncorrectable RAS error",
       'amdgpu_ras.c amdgpu_ras_error_print_error_data(): "%ld uncorrectable hardware errors '
       'detected in %s block" (ACA: "... in total in %s block"); amdgpu_ras.c '
       'amdgpu_ras_global_ras_isr(): "uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) '
       'detected!"',
       r"(?:^|[\s}])(?P<count>[1-9]\d*) (?:new )?uncorrectable hardware errors detected in "
       r"(?:total in )?(?P<detail>\w+) block"
       r"|uncorrectable hardware error\(ERREVENT_\w+\) detected"),
    _c("ras_correctable", "count", "correctable RAS error",
       'amdgpu_ras.c amdgpu_ras_error_print_error_data(): "%ld correctable hardware errors '
       'detected in %s block"',
       r"(?:^|[\s}])(?P<count>[1-9]\d*) (?:new )?correctable hardware errors detected in "
       r"(?:total in )?(?P<detail>\w+) block"),
    _c("ras_poison", "fatal", "RAS poison consumed",
       'amdgpu_umc.c / amdgpu_ras.c amdgpu_ras_interrupt_poison_consumption_handler(): '
       '"Poison is consumed by client %d"',
       r"[Pp]oison (?:is )?consumed by client \d+"),
    _c("ras_bad_page", "warn", "VRAM page retired",
       'amdgpu_ras.c amdgpu_ras_save_bad_pages(): "Saved %d pages to EEPROM table."',
       r"\bSaved (?P<count>[1-9]\d*) pages to EEPROM table"),
    _c("ras_threshold", "fatal", "bad-page threshold exceeded",
       'amdgpu_ras_eeprom.c amdgpu_ras_eeprom_check(): "RAS records:%d exceed threshold:%d"',
       r"\bRAS records:\d+ exceed threshold:\d+"),
    _c("smu_failure", "warn", "SMU firmware did not answer",
       'smu_cmn.c __smu_cmn_reg_print_error(): "SMU: I\'m not done with your previous command", '
       '"SMU: No response msg_reg", "SMU: response:0x%08X for index:%d"; '
       'smu_cmn.c smu_cmn_send_msg_without_waiting() / smu_v11_0.c: "Msg issuing pre-check '
       'failed and SMU may be not in the right state!", "... is timeout (no response)"; '
       'smu_v1x_0_ppt.c: "Failed to export SMU metrics table!"; amdgpu_smu.c smu_disable_dpms(): '
       '"Failed to disable smu features."',
       r"SMU: I'm not done with your previous command|SMU: No response msg_reg"
       r"|SMU: response:0x[0-9A-Fa-f]+ for index|Msg issuing pre-check failed and SMU may be"
       r"|\bis timeout \(no response\)|Failed to export SMU metrics table"
       r"|Failed to disable smu features"),
    _c("psp_failure", "warn", "PSP firmware failure",
       'amdgpu_psp.c psp_hw_init() "PSP firmware loading failed", psp_hw_start() "PSP create '
       'ring failed!", psp_resume() "PSP resume failed", psp_sw_init() "Failed to load psp '
       'firmware!", psp_cmd_submit_buf() "psp gfx command %s(0x%X) failed and response status '
       'is (0x%X)"',
       r"PSP firmware loading failed|PSP create ring failed|PSP resume failed"
       r"|Failed to load psp firmware|psp gfx command \S+ failed and response status"),
    _c("aer_fatal", "fatal", "PCIe AER uncorrectable fatal error",
       'drivers/pci/pcie/aer.c aer_print_error(): "PCIe Bus Error: severity=%s, type=%s, (%s)" '
       'with aer_error_severity_string "Uncorrected (Fatal)" (6.x: "Uncorrectable (Fatal)")',
       r"PCIe Bus Error: severity=Uncorrect(?:ed|able) \(Fatal\), type=(?P<detail>[^,]+)"),
    _c("aer_nonfatal", "warn", "PCIe AER uncorrectable non-fatal error",
       'drivers/pci/pcie/aer.c aer_print_error(): severity "Uncorrected (Non-Fatal)" '
       '(6.x: "Uncorrectable (Non-Fatal)")',
       r"PCIe Bus Error: severity=Uncorrect(?:ed|able) \(Non-Fatal\), type=(?P<detail>[^,]+)"),
    _c("aer_corrected", "count", "PCIe AER corrected error",
       'drivers/pci/pcie/aer.c aer_print_error(): severity "Corrected" (6.x: "Correctable")',
       r"PCIe Bus Error: severity=Correct(?:ed|able), type=(?P<detail>[^,]+)"),
    _c("pcie_recovery_failed", "fatal", "PCIe error recovery failed",
       'drivers/pci/pcie/err.c pcie_do_recovery(): "device recovery failed" '
       '(older: "AER: Device recovery failed")',
       r"[Dd]evice recovery failed"),
    _c("link_down", "warn", "PCIe link down or reset",
       'drivers/pci/hotplug/pciehp_ctrl.c pciehp_handle_presence_or_link_change(): '
       '"Slot(%s): Link Down" (older pciehp: "slot(%s): Link Down event"); '
       'drivers/pci/pcie/dpc.c: "DPC: containment event"; aer.c aer_root_reset(): '
       '"Root Port link has been reset"',
       r"[Ss]lot\([^)]*\): Link Down|DPC: containment event|Root Port link has been reset"),
)

BY_NAME: dict[str, EventClass] = {c.name: c for c in CATALOGUE}
SEVERITIES = ("fatal", "threshold", "warn", "count")

# every hint once: a line with none of them (most of a boot log) is no event
_ALL_HINTS = tuple(dict.fromkeys(h for c in CATALOGUE for h in c.hints))


@dataclass(frozen=True, slots=True)
class Match:
    event_class: EventClass
    ring: str | None
    detail: str | None
    count: int  # how many errors the line reports (RAS counts); 1 otherwise


def could_be_event(text: str) -> bool:
    """False for a line no class can match (most of a boot log): the parser's fast path."""
    for hint in _ALL_HINTS:  # noqa: SIM110 (a plain loop: no generator per line, 1M lines)
        if hint in text:
            return True
    return False


def classify(message: str) -> Match | None:
    """The class of one kernel message (without its device prefix), or None. Pure."""
    for event_class in CATALOGUE:
        for hint in event_class.hints:
            if hint in message:
                break
        else:
            continue
        found = event_class.pattern.search(message)
        if found is None:
            continue
        groups = found.groupdict()
        detail = groups.get("detail") or groups.get("detail2")
        count = int(groups["count"]) if groups.get("count") else 1
        return Match(event_class, groups.get("ring"), detail, min(count, 1 << 32))
    return None
