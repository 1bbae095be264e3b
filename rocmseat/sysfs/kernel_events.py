"""The catalogue of kernel-log event classes: amdgpu's own voice and the PCIe AER driver's.

One table, `CATALOGUE`: each entry is one class with everything every reader of it needs, so a
new class is one edit (tests/sysfs/test_kernel_events.py fails on an entry that lacks a field):

- `pattern` and `words`: the regular expression, and the literal words every match holds one of
  (the fast pre-filter: a line with none of any class's words is never given to a regex);
- `severity`, the class's role in the judge (rocmseat.preflight.events):
  - `fatal`: fails whatever the count (a reset that failed, a device lost, uncorrectable RAS, an
    AER fatal error, a GPU that failed init or resume, engines whose ring or IB test failed);
  - `threshold`: fails at the profile's threshold named by `threshold` (an attribute of
    rocmseat.preflight.events.EventThresholds), warns below it (GPU reset, ring timeout);
  - `warn`: warns (page faults are usually one process's bug; firmware complaints);
  - `count`: counted in the textfile and the JSON, never a finding by itself (a reset that
    succeeded: its `gpu_reset` is the finding; AER corrected errors: the aer family judges their
    rate from the counters). A count class with `judged_with` warns only when a class it names
    follows it on the same GPU (the PSP's command status, which upstream says often appears when
    nothing is wrong);
- `title` (the finding's words) and `advice` (its hint);
- `alert`: the watchdog alert a line raises (a name of rocmseat.watch.alerts; None: none), and
  `blocks_remediation`: while that alert fires, remediation refuses to restart the replica (a
  node problem, not a drafter problem). Every fatal class raises one and blocks;
- `context`: the line after it that the parser attaches ("process": the ring timeout's or page
  fault's process line; "aer": AER's error-bit and register lines), or None;
- `upstream`: the function that prints each wording, the file, and the kernel versions read
  (Linux `drivers/gpu/drm/amd/...` and `drivers/pci/...`; "6.1", "6.6" are the LTS trees,
  "today" the mainline of 2025-2026). The corpus under tests/fixtures/kernel-log/ holds real
  lines from public bug reports for most classes.

A line that matches no class is not an event: the driver's initialisation chatter ("ring gfx_0.0.0
uses VM inv eng 0 on hub 0", "SMU is resumed successfully!") is never a finding. Each class is
judged on its own line: a wrapped or truncated log can keep one line and lose the next.

Pure: text in, values out. The alert names are plain strings here (the sysfs layer imports
nothing of the watchdog); the test checks each against rocmseat.watch.alerts.ALERTS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

SEVERITIES = ("fatal", "threshold", "warn", "count")
CONTEXTS = ("process", "aer")

# the watchdog's alert names (rocmseat/watch/alerts.py), as data
GPU_LOST = "gpu_lost"
GPU_RESET = "gpu_reset"
GPU_RING_TIMEOUT = "gpu_ring_timeout"
GPU_PAGE_FAULT = "gpu_page_fault"
GPU_AER_FAILED = "gpu_aer_failed"

_ADVICE = {
    "fatal": "the GPU needs service or a node reboot: drain it and check the full kernel log",
    "threshold": "the GPU hung this boot; if it repeats, drain the node and check the "
                 "workload, firmware and driver (threshold: the profile's [thresholds])",
    "warn": "usually one process's bug or a firmware hiccup; repeated, it precedes a hang",
    "count": "counted only; the aer and ras families judge the rate",
}

# A PCI address as the kernel prints it (%04x:%02x:%02x.%d)
_ADDR = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
# the event id RAS_EVENT_LOG() puts before a RAS message ("{12}..." , amdgpu_ras.h, 6.10+)
_RAS_ID = r"(?:^|[\s}])"
# rings whose failure stops video engines only, not compute (amdgpu_ring names: vcn_dec_0,
# vcn_enc_0.0, vcn_unified_0, jpeg_dec_0, uvd, uvd_enc_0.0, vce0, vpe)
_MEDIA = r"(?:vcn|jpeg|uvd|vce|vpe)"


@dataclass(frozen=True, slots=True)
class EventClass:
    name: str
    severity: str  # fatal | threshold | warn | count
    title: str  # what the class says, in words
    advice: str  # the finding's hint: what to do
    upstream: str  # the functions that print it, their files and the kernel versions read
    pattern: re.Pattern[str]
    words: tuple[str, ...]  # literal words every match holds one of (the fast pre-filter)
    alert: str | None  # the watchdog alert it raises (rocmseat.watch.alerts), None: none
    blocks_remediation: bool  # while that alert fires, remediation leaves the replica alone
    threshold: str | None = None  # threshold classes: the EventThresholds attribute
    judged_with: tuple[str, ...] = ()  # count classes: warn only with one of these after it
    context: str | None = None  # the line after it the parser attaches: process | aer


def _c(name: str, severity: str, title: str, upstream: str, pattern: str,  # noqa: PLR0917
       words: tuple[str, ...], **extra: Any) -> EventClass:
    """One table row: `extra` holds alert, blocks (default: fatal), advice (default: the
    severity's), threshold, judged_with and context."""
    blocks = extra.pop("blocks", severity == "fatal")
    advice = extra.pop("advice", _ADVICE[severity])
    return EventClass(name=name, severity=severity, title=title, advice=advice,
                      upstream=upstream, pattern=re.compile(pattern), words=words,
                      alert=extra.pop("alert", None), blocks_remediation=blocks, **extra)


# Order matters only where two patterns could meet one line: the more specific first.
CATALOGUE: tuple[EventClass, ...] = (
    # ----- hangs and resets --------------------------------------------------------------------
    _c("ring_soft_recovered", "warn", "ring timeout, soft recovered",
       'amdgpu_job.c amdgpu_job_timedout(): "ring %s timeout, but soft recovered" (6.1, 6.6, '
       'today)',
       r"\bring (?P<ring>\S+) timeout, but soft recovered", ("soft recovered",)),
    _c("ring_timeout", "threshold", "ring timeout",
       'amdgpu_job.c amdgpu_job_timedout(): "ring %s timeout, signaled seq=%u, emitted seq=%u" '
       '(6.1, 6.6, today)',
       r"\bring (?P<ring>\S+) timeout, signaled seq=\d+, emitted seq=\d+", ("timeout, signaled",),
       alert=GPU_RING_TIMEOUT, blocks=False, threshold="ring_timeouts_fail", context="process"),
    _c("gpu_reset_failed", "fatal", "GPU reset failed",
       'amdgpu_device.c amdgpu_device_gpu_recover(): "GPU reset(%d) failed", "GPU reset end '
       'with ret = %d" (negative), "GPU pre asic reset failed with err, %d for drm dev, %s" (a '
       'hive member, 6.1, 6.6, today); amdgpu_job.c amdgpu_job_timedout(): "GPU Recovery '
       'Failed: %d"; amdgpu_device.c amdgpu_device_mode1_reset() / nv.c, soc15.c '
       'nv_asic_mode1_reset(): "GPU mode1 reset failed" (older: "GPU psp mode1 reset failed"); '
       'soc15.c / nv.c *_asic_mode2_reset(): "GPU mode2 reset failed"; amdgpu_smu.c '
       'smu_mode2_reset(): "Mode2 reset failed!"; amdgpu_device.c amdgpu_do_asic_reset() and '
       'amdgpu_device_xgmi_reset_func() (a hive\'s ASIC reset): "ASIC reset failed with error, '
       '%d for drm dev, %s"; sienna_cichlid.c / aldebaran.c / smu_v13_0_10.c '
       '*_mode2_perform_reset(): "ASIC reset failed with error, %d "; amdgpu_reset.c '
       'amdgpu_reset_xgmi_reset_on_init_perform_reset(): "xgmi reset on init: reset failed with '
       'error, %d"',
       r"GPU reset\(\d+\) failed|GPU reset end with ret = -\d+|GPU Recovery Failed: -?\d+"
       r"|GPU (?:psp |smu )?mode[12] reset failed|Mode2 reset failed!"
       rf"|reset failed with error, -?\d+(?: for drm dev, (?P<source>{_ADDR}))?"
       r"|GPU pre asic reset failed with err, -?\d+",
       ("GPU reset", "GPU Recovery", "reset failed", "pre asic reset"), alert=GPU_LOST),
    _c("gpu_jobs_stop", "fatal", "GPU jobs stopped for a RAS emergency restart",
       'amdgpu_device.c amdgpu_device_gpu_recover(): "GPU %s begin!" with "jobs stop" when '
       'amdgpu_ras_need_emergency_restart() (a RAS fatal error: the node restarts; 6.1, 6.6, '
       'today)',
       r"\bGPU jobs stop begin!", ("jobs stop begin",), alert=GPU_LOST),
    _c("gpu_reset", "threshold", "GPU reset",
       'amdgpu_device.c amdgpu_device_gpu_recover(): "GPU %s begin!" with "reset" (6.1, 6.6; '
       'today "GPU %s begin!. Source: %d")',
       r"\bGPU reset begin!", ("GPU reset begin",), alert=GPU_RESET, blocks=False,
       threshold="gpu_resets_fail"),
    _c("gpu_reset_ok", "count", "GPU reset succeeded",
       'amdgpu_device.c amdgpu_do_asic_reset() (today amdgpu_device_reinit_after_reset()): '
       '"GPU reset succeeded, trying to resume" (6.1, 6.6, today)',
       r"\bGPU reset succeeded, trying to resume", ("GPU reset succeeded",)),
    _c("device_lost", "fatal", "device lost from the bus",
       'amdgpu_device.c amdgpu_device_health_check(): "device lost from bus!" (6.9 and later)',
       r"\bdevice lost from bus!", ("lost from bus",), alert=GPU_LOST),
    # ----- init, probe, resume, suspend --------------------------------------------------------
    _c("init_failed", "fatal", "GPU failed to initialise",
       'amdgpu_kms.c amdgpu_driver_load_kms(): "Fatal error during GPU init" (6.1, 6.6; today '
       'amdgpu_device_init() too); amdgpu_device.c amdgpu_device_init(): '
       '"amdgpu_device_ip_init failed"; amdgpu_device_ip_init(): "sw_init of IP block <%s> '
       'failed %d", "hw_init of IP block <%s> failed %d"; amdgpu_device_ip_early_init(): '
       '"early_init of IP block <%s> failed %d"; amdgpu_device_ip_late_init(): "late_init of '
       'IP block <%s> failed %d" (6.1, 6.6, today; DRM_ERROR in 6.1)',
       r"\bFatal error during GPU init\b|\bamdgpu_device_ip_init failed"
       r"|\b(?:sw_init|hw_init|early_init|late_init) of IP block <(?P<detail>[^>]{1,40})> "
       r"failed -?\d+",
       ("Fatal error during", "amdgpu_device_ip_init failed", "init of IP block"),
       alert=GPU_LOST),
    _c("probe_failed", "fatal", "amdgpu failed to probe the GPU",
       'drivers/base/dd.c call_driver_probe(): "probe with driver %s failed with error %d" '
       '(dev_err, 6.9 and later), "%s: probe of %s failed with error %d" (pr_warn, 6.1, 6.6)',
       rf"\bprobe with driver amdgpu failed with error -?\d+"
       rf"|(?:^|\bamdgpu: )probe of (?P<source>{_ADDR}) failed with error -?\d+",
       ("probe with driver amdgpu", "probe of"), alert=GPU_LOST),
    _c("resume_failed", "fatal", "GPU did not come back from resume",
       'amdgpu_device.c amdgpu_device_resume(): "amdgpu_device_ip_resume failed (%d)."; '
       'amdgpu_device_ip_resume_phase1/2/3() (today amdgpu_ip_block_resume()): "resume of IP '
       'block <%s> failed %d" (DRM_ERROR in 6.1, 6.6; dev_err today)',
       r"\bamdgpu_device_ip_resume failed \(-?\d+\)"
       r"|\bresume of IP block <(?P<detail>[^>]{1,40})> failed -?\d+",
       ("amdgpu_device_ip_resume failed", "resume of IP block"), alert=GPU_LOST),
    _c("suspend_failed", "warn", "an IP block failed to suspend",
       'amdgpu_device.c amdgpu_device_ip_suspend_phase1/2() (today amdgpu_ip_block_suspend()): '
       '"suspend of IP block <%s> failed %d" (DRM_ERROR in 6.1, 6.6; dev_err today)',
       r"\bsuspend of IP block <(?P<detail>[^>]{1,40})> failed -?\d+", ("suspend of IP block",),
       advice="a failed suspend usually makes the next resume fail: watch for resume_failed; "
              "disable runtime PM (amdgpu.runpm=0) if it repeats"),
    _c("smu_start_failed", "fatal", "SMU firmware did not start",
       'amdgpu_smu.c smu_hw_init() and smu_resume(): "SMC engine is not correctly up!", '
       '"Failed to setup smc hw!" (6.1, 6.6, today); smu_smc_hw_setup(): "Failed to enable '
       'requested dpm features!"',
       r"SMC engine is not correctly up!|Failed to setup smc hw!"
       r"|Failed to enable requested dpm features!",
       ("SMC engine is not", "setup smc hw", "requested dpm features"), alert=GPU_LOST),
    _c("engine_test_failed", "fatal", "a GPU engine failed its IB test",
       'amdgpu_ib.c amdgpu_ib_ring_tests(): "IB test failed on %s (%d)."; amdgpu_device.c '
       'amdgpu_device_delayed_init_work_handler() (DRM_ERROR) and amdgpu_do_asic_reset() / '
       'amdgpu_device_reinit_after_reset() (dev_err, after a reset): "ib ring test failed '
       '(%d)." (6.1, 6.6, today); video rings are media_test_failed',
       rf"\bIB test failed on (?!{_MEDIA})(?P<ring>\S+) \(-?\d+\)"
       r"|\bib ring test failed \(-?\d+\)",
       ("IB test failed", "ib ring test failed"), alert=GPU_LOST,
       advice="an engine did not execute a job: work on it hangs; drain the node and reboot "
              "(after a reset, the driver retries a full reset: check it succeeded)"),
    _c("ring_test_failed", "warn", "a GPU ring failed its test",
       'amdgpu_ring.c amdgpu_ring_test_helper(): "ring %s test failed (%d)" (DRM_DEV_ERROR, '
       '6.1, 6.6, today; the ring is marked not ready). Often printed inside a reset (KIQ) '
       'that the driver then retries and completes; video rings are media_test_failed',
       rf"\bring (?!{_MEDIA})(?P<ring>\S+) test failed \(-?\d+\)", (" test failed (",),
       advice="a ring did not answer its test: if no 'GPU reset succeeded' follows, the "
              "engine is down; repeated, drain the node"),
    _c("media_test_failed", "warn", "a video engine failed its ring or IB test",
       'amdgpu_ib.c amdgpu_ib_ring_tests(): "IB test failed on %s (%d)."; amdgpu_ring.c '
       'amdgpu_ring_test_helper(): "ring %s test failed (%d)" for the vcn, jpeg, uvd, vce and '
       'vpe rings (6.1, 6.6, today)',
       rf"\bIB test failed on (?P<ring>{_MEDIA}\S*) \(-?\d+\)"
       rf"|\bring (?P<ring2>{_MEDIA}\S*) test failed \(-?\d+\)",
       ("IB test failed", " test failed ("),
       advice="video decode/encode is off on this GPU; compute is not affected"),
    # ----- firmware: MES, KFD, SMU, PSP ---------------------------------------------------------
    _c("mes_failure", "warn", "MES scheduler firmware failed",
       'mes_v11_0.c / mes_v12_0.c mes_v1x_0_submit_pkt_and_poll_completion(): "MES failed to '
       'respond to msg=%s" (6.6, today; "MES(%d) ..." and "MES(%d,%d) ..." on multi-pipe '
       'parts), "MES failed to response msg=%d" (6.1); kfd_device_queue_manager.c '
       'add_queue_mes() / remove_queue_mes(): "failed to add hardware queue to MES, '
       'doorbell=0x%x", "failed to remove hardware queue from MES, doorbell=0x%x", "MES might '
       'be in unrecoverable state, issue a GPU reset" (6.1, 6.6, today); suspend_all_queues_mes()'
       ': "Suspending all queues failed"; amdgpu_mes.c amdgpu_mes_suspend(): "failed to suspend '
       'all gangs"',
       r"\bMES(?:\([\d,]+\))? failed to respond(?: to)? msg=(?P<detail>\w+)"
       r"|\bMES failed to response msg=(?P<detail2>\w+)"
       r"|failed to (?:add hardware queue to|remove hardware queue from) MES"
       r"|MES might be in unrecoverable state|Suspending all queues failed"
       r"|failed to suspend all gangs",
       ("MES failed", "MES(", "hardware queue", "MES might", "all queues failed", "all gangs")),
    _c("kfd_preemption", "warn", "KFD queue preemption failed (HWS hang)",
       'kfd_device_queue_manager.c unmap_queues_cpsch(): "The cp might be in an unrecoverable '
       'state due to an unsuccessful queues preemption" (kfd_hws_hang() schedules a reset); '
       'kfd_mqd_manager / amdgpu_amdkfd_gfx: "Queue preemption time out", "preemption failed"; '
       'kfd_process.c kfd_process_evict_queues(): "Failed to evict process queues", '
       'kfd_device_queue_manager.c evict_process_queues_*(): "Failed to evict queue %d"; '
       'kfd_device.c kgd2kfd_quiesce(): "Failed to quiesce KFD" (6.1, 6.6, today)',
       r"unsuccessful queues preemption|Queue preemption time out|\bpreemption failed"
       r"|Failed to evict process queues|Failed to evict queue \d+|Failed to quiesce KFD",
       ("preemption", "Failed to evict", "quiesce KFD")),
    _c("smu_failure", "warn", "SMU firmware did not answer",
       'smu_cmn.c __smu_cmn_reg_print_error() (6.1, 6.6, 6.12, today): "SMU: I\'m not done '
       'with your previous command", "SMU: unknown command", "SMU: valid command, bad '
       'prerequisites", "SMU: I\'m very busy for your command", "SMU: response:0x%08X for '
       'index:%d". Not in smu_cmn.c of 6.1 or 6.12: "SMU: No response msg_reg: %x resp_reg: '
       '%x" (the 2025 SMU message-control rework, seen on 7.0 kernels), "Msg issuing pre-check '
       'failed ... and SMU may be not in the right state!" (smu_v11_0.c / smu_v12_0.c '
       'smu_v1x_0_send_msg_with_param() of 5.4-5.9, smu_cmn.c of 5.10-5.13), "message: %15s '
       '(%d) param: 0x%08x is timeout (no response)" (smu_cmn.c smu_cmn_send_smc_msg_with_param'
       '() of 5.10-5.12); navi10_ppt.c, sienna_cichlid_ppt.c, smu_v13_0_*_ppt.c '
       '*_get_smu_metrics_data(): "Failed to export SMU metrics table!"; amdgpu_smu.c '
       'smu_disable_dpms(): "Failed to disable smu features."',
       r"SMU: I'm not done with your previous command|SMU: No response msg_reg"
       r"|SMU: response:0x[0-9A-Fa-f]+ for index|SMU: unknown command"
       r"|SMU: valid command, bad prerequisites|SMU: I'm very busy for your command"
       r"|Msg issuing pre-check failed(?:\(0x[0-9A-Fa-f]+\))? and SMU may be"
       r"|\bis timeout \(no response\)|Failed to export SMU metrics table"
       r"|Failed to disable smu features",
       ("SMU:", "SMU may", "SMU metrics", "no response", "smu features")),
    _c("psp_failure", "warn", "PSP firmware failure",
       'amdgpu_psp.c psp_hw_init(): "PSP firmware loading failed", psp_hw_start(): "PSP create '
       'ring failed!", psp_resume(): "PSP resume failed", psp_sw_init(): "Failed to load psp '
       'firmware!" (6.1, 6.6, today)',
       r"PSP firmware loading failed|PSP create ring failed|PSP resume failed"
       r"|Failed to load psp firmware",
       ("PSP firmware", "PSP create", "PSP resume failed", "psp firmware")),
    _c("psp_cmd_status", "count", "PSP command answered with a status",
       'amdgpu_psp.c psp_cmd_submit_buf(): "psp gfx command %s(0x%X) failed and response '
       'status is (0x%X)" (6.1, 6.6, today; upstream\'s comment there: the message often '
       'appears when nothing is wrong, e.g. a TA that is not loaded)',
       r"psp gfx command \S+ failed and response status", ("psp gfx command",),
       judged_with=("psp_failure", "init_failed", "resume_failed", "smu_start_failed",
                    "gpu_reset_failed"),
       advice="counted only: it is judged with the PSP, init or resume failure that follows it"),
    # ----- memory and RAS ------------------------------------------------------------------------
    _c("page_fault", "warn", "GPU VM page fault",
       'gmc_v9_0.c gmc_v9_0_process_interrupt(), gmc_v10_0.c, gmc_v11_0.c, gmc_v12_0.c: '
       '"[%s] %spage fault (src_id:%u ring:%u vmid:%u pasid:%u" (6.1, 6.6, today); GCN-era '
       'gmc_v6_0.c / gmc_v7_0.c / gmc_v8_0.c *_process_interrupt(): "GPU fault detected: %d '
       '0x%08x" (6.1, 6.6, today; 6.10 and later dev_info on gmc_v6_0)',
       r"\[(?P<detail>\w+)\] (?:no-retry |retry )?(?:VMC )?page fault \(src_id:\d+ "
       r"ring:(?P<ring>\d+) vmid:\d+ pas_?id:\d+"
       r"|\bGPU fault detected: \d+ 0x[0-9a-fA-F]+",
       ("page fault", "GPU fault detected"), alert=GPU_PAGE_FAULT, blocks=False,
       context="process"),
    _c("ras_uncorrectable", "fatal", "uncorrectable RAS error",
       'amdgpu_ras.c amdgpu_ras_error_print_error_data(): "%ld uncorrectable hardware errors '
       'detected in %s block" (ACA: "... in total in %s block"; 6.10+: "{%llu}" event id '
       'first); amdgpu_ras.c amdgpu_ras_global_ras_isr(): "uncorrectable hardware '
       'error(ERREVENT_ATHUB_INTERRUPT) detected!" (6.1, 6.6, today)',
       rf"{_RAS_ID}(?P<count>[1-9]\d*) (?:new )?uncorrectable hardware errors detected in "
       r"(?:total in )?(?P<detail>\w+) block"
       r"|uncorrectable hardware error\(ERREVENT_\w+\) detected",
       ("uncorrectable hardware error",), alert=GPU_LOST),
    _c("ras_correctable", "count", "correctable RAS error",
       'amdgpu_ras.c amdgpu_ras_error_print_error_data(): "%ld correctable hardware errors '
       'detected in %s block" (6.1, 6.6, today)',
       rf"{_RAS_ID}(?P<count>[1-9]\d*) (?:new )?correctable hardware errors detected in "
       r"(?:total in )?(?P<detail>\w+) block",
       (" correctable hardware errors",)),
    _c("ras_poison", "fatal", "RAS poison consumed",
       'amdgpu_umc.c / amdgpu_ras.c amdgpu_ras_interrupt_poison_consumption_handler(): "GPU '
       'reset for %s RAS poison consumption is issued!" (6.1, 6.6, today; "{%llu}" first in '
       'the 2025 ras module ras_process.c, which also prints "{%llu} %s RAS poison consumption '
       'is issued!"); kfd_int_process_v9.c event_interrupt_poison_consumption_v9(): "RAS poison '
       'consumption, unmap queue flow succeeded: client id %d", "RAS poison consumption, fall '
       'back to gpu reset flow: client id %d" (6.1-6.9), "poison is consumed by client %d, kick '
       'off gpu reset flow" (6.10 and later); amdgpu_umc.c: "Poison is consumed by client %d"',
       r"[Pp]oison (?:is )?consumed by client \d+"
       r"|RAS poison consumption, (?:unmap queue flow succeeded|fall ?back to gpu reset flow)"
       r"|\bRAS poison consumption is issued!",
       ("oison",), alert=GPU_LOST),
    _c("ras_bad_page", "warn", "VRAM page retired",
       'amdgpu_ras.c amdgpu_ras_save_bad_pages(): "Saved %d pages to EEPROM table." (6.1, 6.6, '
       'today)',
       r"\bSaved (?P<count>[1-9]\d*) pages to EEPROM table", ("EEPROM",)),
    _c("ras_threshold", "fatal", "bad-page threshold reached",
       'amdgpu_ras_eeprom.c amdgpu_ras_eeprom_check() (ROCm amdgpu and today): "RAS records:%d '
       'exceed threshold:%d"; amdgpu_ras_eeprom.c amdgpu_ras_eeprom_append() / '
       'amdgpu_ras_eeprom_update_header(): "Saved bad pages %d reaches threshold value %d" '
       '(6.6, today), "Saved bad pages(%d) reaches threshold value(%d)." (6.1)',
       r"\bRAS records:\d+ exceed threshold:\d+"
       r"|\bSaved bad pages ?\(?\d+\)? reaches threshold value ?\(?\d+\)?",
       ("RAS records", "reaches threshold"), alert=GPU_LOST),
    # ----- XGMI ----------------------------------------------------------------------------------
    _c("xgmi_add_failed", "fatal", "GPU failed to join its XGMI hive",
       'amdgpu_xgmi.c amdgpu_xgmi_add_device(): "XGMI: Failed to add node %d, hive 0x%llx ret: '
       '%d" (6.1, 6.6, today)',
       r"\bXGMI: Failed to add node \d+", ("XGMI: Failed to add",), alert=GPU_LOST),
    _c("xgmi_pcs_uncorrectable", "fatal", "XGMI link data loss",
       'amdgpu_xgmi.c xgmi_v6_4_0_aca_bank_parser() (6.10+; xgmi_v6_4_0_pcs_mca_get_error_type() '
       'in 6.6-6.9) and amdgpu_xgmi_query_pcs_error_status(): "%s detected" with '
       'xgmi_v6_4_0_ras_error_code_ext[] / xgmi_pcs_ras_fields[] / wafl_pcs_ras_fields[]: '
       '"XGMI PCS DataLossErr", "XGMI PCS DataParityErr" (the codes the parser counts as '
       'uncorrectable), "XGMI3X16 PCS ...", "WAFL PCS ..."',
       r"\b(?:XGMI|XGMI3X16|WAFL) PCS (?P<detail>DataLossErr|DataParityErr) detected",
       ("PCS DataLossErr", "PCS DataParityErr"), alert=GPU_LOST),
    _c("xgmi_pcs_error", "warn", "XGMI link error",
       'amdgpu_xgmi.c xgmi_v6_4_0_aca_bank_parser() / amdgpu_xgmi_query_pcs_error_status(): '
       '"%s detected" with the other PCS error names ("XGMI PCS TrainingErr", "XGMI PCS '
       'BERExceededErr", "XGMI PCS CRCErr", ... ; 6.6, today)',
       r"\b(?:XGMI|XGMI3X16|WAFL) PCS (?P<detail>\w+Err) detected", (" PCS ",),
       advice="an XGMI link retrained or replayed: repeated, the link degrades; see the xgmi "
              "family's link status and widths"),
    # ----- PCIe ----------------------------------------------------------------------------------
    _c("aer_fatal", "fatal", "PCIe AER uncorrectable fatal error",
       'drivers/pci/pcie/aer.c aer_print_error(): "PCIe Bus Error: severity=%s, type=%s, (%s)" '
       'with aer_error_severity_string "Uncorrected (Fatal)" (6.1; 6.6 and later '
       '"Uncorrectable (Fatal)")',
       r"PCIe Bus Error: severity=Uncorrect(?:ed|able) \(Fatal\), type=(?P<detail>[^,]+)",
       ("PCIe Bus Error",), alert=GPU_AER_FAILED, context="aer"),
    _c("aer_nonfatal", "warn", "PCIe AER uncorrectable non-fatal error",
       'drivers/pci/pcie/aer.c aer_print_error(): severity "Uncorrected (Non-Fatal)" '
       '(6.6 and later: "Uncorrectable (Non-Fatal)")',
       r"PCIe Bus Error: severity=Uncorrect(?:ed|able) \(Non-Fatal\), type=(?P<detail>[^,]+)",
       ("PCIe Bus Error",), context="aer"),
    _c("aer_corrected", "count", "PCIe AER corrected error",
       'drivers/pci/pcie/aer.c aer_print_error(): severity "Corrected" (6.6 and later: '
       '"Correctable")',
       r"PCIe Bus Error: severity=Correct(?:ed|able), type=(?P<detail>[^,]+)",
       ("PCIe Bus Error",), context="aer"),
    _c("aer_fatal_message", "fatal", "PCIe port received a fatal error message",
       'drivers/pci/pcie/aer.c aer_print_port_info() (6.1, 6.6) / aer_print_source() (today): '
       '"%s%s error message received from %04x:%02x:%02x.%d" (today "...%s" with " (no details '
       'found" when the source device is not found) with "Uncorrected (Fatal)" / '
       '"Uncorrectable (Fatal)", "Multiple " first for several; older: "%s%s error received: '
       '%04x:%02x:%02x.%d". The subject is the source device it names',
       rf"Uncorrect(?:ed|able) \(Fatal\) error (?:message received from|received:) "
       rf"(?:id=)?(?P<source>{_ADDR})",
       ("(Fatal) error",), alert=GPU_AER_FAILED),
    _c("aer_firmware_first", "warn", "PCIe error reported by the firmware (APEI GHES)",
       'drivers/pci/pcie/aer.c pci_print_aer() (the firmware-first path: ghes.c '
       'ghes_handle_aer() / cper.c cper_print_pcie() -> aer_recover_work_func()): "aer_status: '
       '0x%08x, aer_mask: 0x%08x", "aer_layer=%s, aer_agent=%s", "aer_uncor_severity: 0x%08x" '
       '(uncorrectable only) and no "PCIe Bus Error" (6.1, 6.6, today); the line does not say '
       'whether the error was corrected: the aer family judges the aer_dev_* counters',
       r"\baer_status: 0x[0-9a-fA-F]+, aer_mask: 0x[0-9a-fA-F]+"
       r"|\baer_layer=(?P<detail>[^,]{1,40}), aer_agent=\S+|\baer_uncor_severity: 0x[0-9a-fA-F]+",
       ("aer_",), context="aer",
       advice="the platform firmware handled a PCIe error on this device: check the aer "
              "counters and the BMC's event log"),
    _c("pcie_recovery_failed", "fatal", "PCIe error recovery failed",
       'drivers/pci/pcie/err.c pcie_do_recovery(): "device recovery failed" (dev_fmt "AER: "; '
       'older: "AER: Device recovery failed")',
       r"[Dd]evice recovery failed", ("evice recovery failed",), alert=GPU_AER_FAILED),
    _c("link_down", "warn", "PCIe link down or reset",
       'drivers/pci/hotplug/pciehp_ctrl.c pciehp_handle_presence_or_link_change(): '
       '"Slot(%s): Link Down" (older pciehp: "slot(%s): Link Down event"); '
       'drivers/pci/pcie/dpc.c: "DPC: containment event"; aer.c aer_root_reset(): '
       '"Root Port link has been reset"',
       r"[Ss]lot\([^)]*\): Link Down|DPC: containment event|Root Port link has been reset",
       ("Link Down", "DPC", "link has been reset")),
)

BY_NAME: dict[str, EventClass] = {c.name: c for c in CATALOGUE}

# The one cheap test before any regex: every line a class can match holds one of these (the
# device prefix amdgpu_* prints, the pcieport/pciehp prefixes of the port drivers, the "AER: "
# dev_fmt of aer.c and err.c, the "PCIe Bus Error" of older kernels' AER lines from any
# device, the firmware-first "aer_" lines, "[drm" of every DRM_ERROR and DRM_INFO line); most of
# a boot log holds none. tests/sysfs/test_kernel_events.py checks every class's sample lines.
ANCHORS = ("amdgpu", "pcie", "AER", "aer_", "PCIe Bus", "[drm")
# every class word once
WORDS = tuple(dict.fromkeys(w for c in CATALOGUE for w in c.words))


def _cover(words: tuple[str, ...]) -> tuple[str, ...]:
    """A few substrings such that every word holds one (greedy set cover over substrings of 4
    to 8 characters, a shorter word whole; most words first, then the longer): the second test
    tries these instead of every word. Derived from the table, so it cannot drift from it."""
    left, keys = set(words), []
    while left:
        covers: dict[str, set[str]] = {}
        for word in sorted(left):
            for size in range(min(4, len(word)), 9):
                for i in range(len(word) - size + 1):
                    covers.setdefault(word[i:i + size], set()).add(word)
        best = max(sorted(covers), key=lambda k: (len(covers[k]), len(k)))
        keys.append(best)
        left -= covers[best]
    return tuple(keys)


KEYS = _cover(WORDS)


@dataclass(frozen=True, slots=True)
class Match:
    event_class: EventClass
    ring: str | None
    detail: str | None
    count: int  # how many errors the line reports (RAS counts); 1 otherwise
    source: str | None = None  # a device the message itself names (AER's source, a probe's)


def about_gpu(text: str) -> bool:
    """False for a line no class can match because it is not about a GPU or a PCIe port (most
    of a boot log): the one cheap test before anything else."""
    return ("amdgpu" in text or "pcie" in text or "AER" in text or "aer_" in text
            or "PCIe Bus" in text or "[drm" in text)  # ANCHORS, unrolled: 1M lines


def could_be_event(text: str) -> bool:
    """False for a line no class can match: no anchor, or none of the classes' words (tried
    through KEYS, a few substrings every word holds one of)."""
    if not about_gpu(text):
        return False
    for key in KEYS:  # noqa: SIM110 (a plain loop: no generator per line)
        if key in text:
            return True
    return False


def classify(message: str) -> Match | None:
    """The class of one kernel message (without its device prefix), or None. Pure."""
    for event_class in CATALOGUE:
        for word in event_class.words:
            if word in message:
                break
        else:
            continue
        found = event_class.pattern.search(message)
        if found is None:
            continue
        groups = found.groupdict()
        detail = groups.get("detail") or groups.get("detail2")
        ring = groups.get("ring") or groups.get("ring2")
        count = int(groups["count"]) if groups.get("count") else 1
        return Match(event_class, ring, detail, min(count, 1 << 32), groups.get("source"))
    return None
