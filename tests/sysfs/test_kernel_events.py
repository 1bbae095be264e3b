"""The kernel-log catalogue (rocmseat/sysfs/kernel_events.py) and the parser's record rules
(rocmseat/sysfs/kernlog.py): one complete entry per class, every upstream wording of issue 34
classified on its own line, only kernel records classified.

Every line below is synthetic, built from the upstream format string named beside it (the
function that prints it and the kernel versions whose tree holds that wording: "6.1" and "6.6"
the LTS trees, "today" mainline 2025-2026), with made-up addresses and values; none is a
capture. Real lines live in tests/fixtures/kernel-log/corpus/.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from rocmseat.preflight.events import EventThresholds
from rocmseat.sysfs import kernel_events
from rocmseat.sysfs.kernel_events import (
    ANCHORS,
    BY_NAME,
    CATALOGUE,
    CONTEXTS,
    SEVERITIES,
    EventClass,
    about_gpu,
    classify,
)
from rocmseat.sysfs.kernlog import KernelEvent, KernelLogParser, split_line
from rocmseat.watch.alerts import ALERTS

GPU = "0000:86:00.0"
PORT = "0000:80:02.0"


def parse(*lines: str) -> list[KernelEvent]:
    parser = KernelLogParser()
    out = []
    for line in lines:
        out += parser.feed(line)
    return [e for e in out + parser.flush() if isinstance(e, KernelEvent)]


# ----- one entry per class, complete --------------------------------------------------------

_FIELDS = {f.name for f in dataclasses.fields(EventClass)}


def test_the_entry_has_every_field_the_readers_need():
    """Preflight (severity, threshold, title, advice, judged_with), the watchdog (alert,
    blocks_remediation), the parser (pattern, words, context): all from the one entry."""
    assert {"pattern", "words", "severity", "title", "advice", "upstream", "alert",
            "blocks_remediation", "threshold", "judged_with", "context"} <= _FIELDS
    assert not hasattr(kernel_events, "_HINTS")  # no second table to drift from the first


@pytest.mark.parametrize("event_class", CATALOGUE, ids=lambda c: c.name)
def test_every_class_has_every_field(event_class: EventClass):
    c = event_class
    assert re.fullmatch(r"[a-z][a-z0-9_]+", c.name)
    assert c.severity in SEVERITIES
    assert c.title and c.advice and c.words and all(c.words)
    assert isinstance(c.pattern, re.Pattern)
    # every wording cites the function that prints it and its file
    assert re.search(r"\w+\(\)", c.upstream) and re.search(r"\w+\.c\b", c.upstream), c.upstream
    assert c.alert is None or c.alert in ALERTS, c.alert
    assert isinstance(c.blocks_remediation, bool)
    assert c.context is None or c.context in CONTEXTS
    if c.severity == "fatal":  # every fatal class raises an alert and holds remediation back
        assert c.alert is not None and c.blocks_remediation, c.name
    if c.blocks_remediation:
        assert c.alert is not None
    thresholds = {f.name for f in dataclasses.fields(EventThresholds)}
    assert (c.threshold in thresholds) if c.severity == "threshold" else c.threshold is None
    assert all(other in BY_NAME for other in c.judged_with)
    assert not c.judged_with or c.severity == "count"


def test_class_names_are_unique():
    assert len(BY_NAME) == len(CATALOGUE)


# ----- every wording, each on its own line ----------------------------------------------------

# (class, line, who prints it). Each wording is one a GPU that failed prints; on main before
# issue 34 none of the lines marked NEW was classified (or was classified wrongly).
WORDINGS: list[tuple[str, str, str]] = [
    # resume / init / probe
    ("resume_failed", f"amdgpu {GPU}: amdgpu: amdgpu_device_ip_resume failed (-110).",
     "amdgpu_device.c amdgpu_device_resume(), 6.1, 6.6, today"),
    ("resume_failed", "[drm:amdgpu_device_ip_resume_phase2 [amdgpu]] *ERROR* resume of IP "
     "block <gfx_v9_0> failed -110",
     "amdgpu_device.c amdgpu_device_ip_resume_phase2() DRM_ERROR, 6.1, 6.6"),
    ("resume_failed", f"amdgpu {GPU}: amdgpu: resume of IP block <smu> failed -62",
     "amdgpu_device.c amdgpu_ip_block_resume() dev_err, today"),
    ("suspend_failed", "[drm:amdgpu_device_ip_suspend_phase2 [amdgpu]] *ERROR* suspend of IP "
     "block <psp> failed -22",
     "amdgpu_device.c amdgpu_device_ip_suspend_phase2() DRM_ERROR, 6.1, 6.6"),
    ("suspend_failed", f"amdgpu {GPU}: amdgpu: suspend of IP block <gfx_v11_0> failed -110",
     "amdgpu_device.c amdgpu_ip_block_suspend() dev_err, today"),
    ("init_failed", f"amdgpu {GPU}: amdgpu: Fatal error during GPU init",
     "amdgpu_kms.c amdgpu_driver_load_kms(), 6.1, 6.6, today"),
    ("init_failed", f"amdgpu {GPU}: amdgpu: amdgpu_device_ip_init failed",
     "amdgpu_device.c amdgpu_device_init(), 6.1, 6.6, today"),
    ("init_failed", "[drm:amdgpu_device_ip_init [amdgpu]] *ERROR* hw_init of IP block <smu> "
     "failed -62", "amdgpu_device.c amdgpu_device_ip_init(), 6.1, 6.6, today"),
    ("init_failed", "[drm:amdgpu_device_ip_init] *ERROR* sw_init of IP block <psp> failed -2",
     "amdgpu_device.c amdgpu_device_ip_init() (built in), 6.1, 6.6, today"),
    ("init_failed", f"amdgpu {GPU}: amdgpu: late_init of IP block <vcn_v4_0> failed -22",
     "amdgpu_device.c amdgpu_device_ip_late_init(), 6.1, 6.6, today"),
    ("probe_failed", f"amdgpu {GPU}: probe with driver amdgpu failed with error -22",
     "drivers/base/dd.c call_driver_probe() dev_err, 6.9 and later"),
    ("probe_failed", f"amdgpu: probe of {GPU} failed with error -22",
     "drivers/base/dd.c call_driver_probe() pr_warn, 6.1, 6.6"),
    ("smu_start_failed", f"amdgpu {GPU}: amdgpu: SMC engine is not correctly up!",
     "amdgpu_smu.c smu_resume() / smu_hw_init(), 6.1, 6.6, today"),
    ("smu_start_failed", f"amdgpu {GPU}: amdgpu: Failed to setup smc hw!",
     "amdgpu_smu.c smu_resume() / smu_hw_init(), 6.1, 6.6, today"),
    ("smu_start_failed", f"amdgpu {GPU}: Failed to enable requested dpm features!",
     "amdgpu_smu.c smu_smc_hw_setup(), 6.1, 6.6, today"),
    # engines
    ("engine_test_failed", f"amdgpu {GPU}: IB test failed on gfx_0.0.0 (-110).",
     "amdgpu_ib.c amdgpu_ib_ring_tests() DRM_DEV_ERROR, 6.1, 6.6, today"),
    ("engine_test_failed", f"amdgpu {GPU}: amdgpu: IB test failed on sdma0 (-110).",
     "amdgpu_ib.c amdgpu_ib_ring_tests(), 6.1, 6.6, today"),
    ("engine_test_failed", "[drm:amdgpu_device_delayed_init_work_handler [amdgpu]] *ERROR* ib "
     "ring test failed (-110).", "amdgpu_device.c delayed init DRM_ERROR, 6.1, 6.6, today"),
    ("engine_test_failed", f"amdgpu {GPU}: amdgpu: ib ring test failed (-110).",
     "amdgpu_device.c amdgpu_device_reinit_after_reset() dev_err, 6.6, today"),
    ("ring_test_failed", f"amdgpu {GPU}: [drm:amdgpu_ring_test_helper [amdgpu]] *ERROR* ring "
     "kiq_2.1.0 test failed (-110)", "amdgpu_ring.c amdgpu_ring_test_helper(), 6.1, 6.6, today"),
    ("ring_test_failed", f"amdgpu {GPU}: ring sdma0 test failed (-110)",
     "amdgpu_ring.c amdgpu_ring_test_helper(), 6.1, 6.6, today"),
    ("media_test_failed", f"amdgpu {GPU}: ring vcn_dec_0 test failed (-110)",
     "amdgpu_ring.c amdgpu_ring_test_helper(), 6.1, 6.6, today"),
    ("media_test_failed", f"amdgpu {GPU}: IB test failed on jpeg_dec (-110).",
     "amdgpu_ib.c amdgpu_ib_ring_tests(), 6.1, 6.6, today"),
    # resets
    ("gpu_reset", f"amdgpu {GPU}: amdgpu: GPU reset begin!",
     "amdgpu_device.c amdgpu_device_gpu_recover() \"GPU %s begin!\", 6.1, 6.6"),
    ("gpu_reset", f"amdgpu {GPU}: amdgpu: GPU reset begin!. Source:  3",
     "amdgpu_device.c amdgpu_device_gpu_recover(), today"),
    ("gpu_jobs_stop", f"amdgpu {GPU}: amdgpu: GPU jobs stop begin!",
     "amdgpu_device.c amdgpu_device_gpu_recover() emergency restart, 6.1, 6.6, today"),
    ("gpu_reset_failed", f"amdgpu {GPU}: amdgpu: GPU mode1 reset failed",
     "amdgpu_device.c amdgpu_device_mode1_reset(), 6.1, 6.6, today"),
    ("gpu_reset_failed", f"amdgpu {GPU}: amdgpu: GPU psp mode1 reset failed",
     "nv.c nv_asic_mode1_reset(), 5.x"),
    ("gpu_reset_failed", f"amdgpu {GPU}: amdgpu: GPU mode2 reset failed",
     "soc15.c / nv.c *_asic_mode2_reset(), 6.1, 6.6, today"),
    ("gpu_reset_failed", f"amdgpu {GPU}: amdgpu: Mode2 reset failed!",
     "amdgpu_smu.c smu_mode2_reset(), 6.1, 6.6, today"),
    ("gpu_reset_failed", f"amdgpu {GPU}: amdgpu: ASIC reset failed with error, -62 for drm "
     f"dev, {GPU}", "amdgpu_device.c amdgpu_do_asic_reset() (a hive), 6.1, 6.6, today"),
    ("gpu_reset_failed", "[drm] ASIC reset failed with error, -110 for drm dev, "
     f"{GPU}", "amdgpu_device.c amdgpu_device_xgmi_reset_func() DRM_WARN, 6.1"),
    ("gpu_reset_failed", f"amdgpu {GPU}: amdgpu: GPU pre asic reset failed with err, -110 for "
     f"drm dev, {GPU} ", "amdgpu_device.c amdgpu_device_gpu_recover() hive member, 6.1-today"),
    ("gpu_reset_failed", f"amdgpu {GPU}: amdgpu: xgmi reset on init: reset failed with error, "
     "-110", "amdgpu_reset.c amdgpu_reset_xgmi_reset_on_init_perform_reset(), 6.6, today"),
    ("gpu_reset_failed", f"amdgpu {GPU}: amdgpu: ASIC reset failed with error, -62 ",
     "sienna_cichlid.c sienna_cichlid_mode2_perform_reset(), 6.1, 6.6, today"),
    # RAS
    ("ras_poison", f"amdgpu {GPU}: amdgpu: RAS poison consumption, unmap queue flow "
     "succeeded: client id 2", "kfd_int_process_v9.c event_interrupt_poison_consumption_v9(), "
     "6.1-6.9"),
    ("ras_poison", f"amdgpu {GPU}: amdgpu: RAS poison consumption, fall back to gpu reset "
     "flow: client id 2", "kfd_int_process_v9.c, 6.1-6.9"),
    ("ras_poison", f"amdgpu {GPU}: amdgpu: GPU reset for umc RAS poison consumption is issued!",
     "amdgpu_ras.c amdgpu_ras_interrupt_poison_consumption_handler(), 6.1, 6.6"),
    ("ras_poison", f"amdgpu {GPU}: amdgpu: {{7}}GPU reset for gfx RAS poison consumption is "
     "issued!", "amdgpu_ras.c RAS_EVENT_LOG(), 6.10 and later"),
    ("ras_poison", f"amdgpu {GPU}: amdgpu: poison is consumed by client 12, kick off gpu reset "
     "flow", "kfd_int_process_v9.c, 6.10 and later"),
    ("ras_threshold", f"amdgpu {GPU}: amdgpu: Saved bad pages 130 reaches threshold value 128",
     "amdgpu_ras_eeprom.c amdgpu_ras_eeprom_append(), 6.6, today"),
    ("ras_threshold", f"amdgpu {GPU}: amdgpu: Saved bad pages(130) reaches threshold "
     "value(128).", "amdgpu_ras_eeprom.c amdgpu_ras_eeprom_xfer(), 6.1"),
    ("ras_uncorrectable", f"amdgpu {GPU}: amdgpu: {{3}}2 uncorrectable hardware errors "
     "detected in umc block", "amdgpu_ras.c RAS_EVENT_LOG(), 6.10 and later"),
    # firmware
    ("mes_failure", f"amdgpu {GPU}: amdgpu: MES(0,0) failed to respond to msg=REMOVE_QUEUE",
     "mes_v12_0.c mes_v12_0_submit_pkt_and_poll_completion(), today"),
    ("mes_failure", f"amdgpu {GPU}: amdgpu: failed to remove hardware queue from MES, "
     "doorbell=0x1002", "kfd_device_queue_manager.c remove_queue_mes(), 6.1, 6.6, today"),
    ("mes_failure", "amdgpu: failed to add hardware queue to MES, doorbell=0x1002",
     "kfd_device_queue_manager.c add_queue_mes() pr_err, 6.1"),
    ("mes_failure", f"amdgpu {GPU}: amdgpu: MES might be in unrecoverable state, issue a GPU "
     "reset", "kfd_device_queue_manager.c add_queue_mes(), 6.1, 6.6, today"),
    ("kfd_preemption", f"amdgpu {GPU}: amdgpu: Failed to evict queue 4",
     "kfd_device_queue_manager.c evict_process_queues_cpsch(), 6.6, today"),
    ("kfd_preemption", "amdgpu: Failed to quiesce KFD", "kfd_device.c kgd2kfd_quiesce()"),
    ("smu_failure", f"amdgpu {GPU}: amdgpu: SMU: I'm very busy for your command: index:12 "
     "param:0x00000000 message:GetMetricsTable",
     "smu_cmn.c __smu_cmn_reg_print_error(), 6.1, 6.6, today"),
    ("smu_failure", f"amdgpu {GPU}: amdgpu: SMU: valid command, bad prerequisites: index:12 "
     "param:0x00000000 message:GetMetricsTable", "smu_cmn.c __smu_cmn_reg_print_error()"),
    ("smu_failure", f"amdgpu {GPU}: amdgpu: Msg issuing pre-check failed(0xff) and SMU may be "
     "not in the right state!", "smu_cmn.c smu_cmn_send_msg_without_waiting(), 5.10-5.13"),
    # page faults, GCN era
    ("page_fault", f"amdgpu {GPU}: GPU fault detected: 146 0x0c880804",
     "gmc_v8_0.c gmc_v8_0_process_interrupt(), 6.1, 6.6, today"),
    ("page_fault", f"amdgpu {GPU}: amdgpu: GPU fault detected: 147 0x09000802 for process "
     "python3 pid 2288 thread python3 pid 2316", "gmc_v7_0.c with task info, 6.1, 6.6"),
    # XGMI (issue 33 item 2)
    ("xgmi_add_failed", f"amdgpu {GPU}: amdgpu: XGMI: Failed to add node 3, hive 0x5f1d2c3b "
     "ret: -22", "amdgpu_xgmi.c amdgpu_xgmi_add_device(), 6.1, 6.6, today"),
    ("xgmi_pcs_uncorrectable", f"amdgpu {GPU}: amdgpu: XGMI PCS DataLossErr detected",
     "amdgpu_xgmi.c xgmi_v6_4_0_aca_bank_parser(), 6.10 and later"),
    ("xgmi_pcs_uncorrectable", f"amdgpu {GPU}: amdgpu: WAFL PCS DataParityErr detected",
     "amdgpu_xgmi.c amdgpu_xgmi_query_pcs_error_status(), 6.1, 6.6"),
    ("xgmi_pcs_error", f"amdgpu {GPU}: amdgpu: XGMI PCS BERExceededErr detected",
     "amdgpu_xgmi.c xgmi_v6_4_0_pcs_mca_get_error_type(), 6.6"),
    ("xgmi_pcs_error", f"amdgpu {GPU}: amdgpu: XGMI3X16 PCS TrainingErr detected",
     "amdgpu_xgmi.c amdgpu_xgmi_query_pcs_error_status(), 6.6, today"),
    # PCIe
    ("aer_fatal_message", f"pcieport {PORT}: AER: Uncorrected (Fatal) error message received "
     f"from {GPU}", "aer.c aer_print_port_info(), 6.1"),
    ("aer_fatal_message", f"pcieport {PORT}: AER: Uncorrectable (Fatal) error message received "
     f"from {GPU} (no details found", "aer.c aer_print_source(), today"),
    ("aer_fatal_message", f"pcieport {PORT}: AER: Multiple Uncorrectable (Fatal) error message "
     f"received from {GPU}", "aer.c aer_print_port_info(), 6.6"),
    ("aer_firmware_first", f"amdgpu {GPU}: aer_status: 0x00004000, aer_mask: 0x00000000",
     "aer.c pci_print_aer() (APEI GHES), 6.1, 6.6, today"),
    ("aer_firmware_first", f"amdgpu {GPU}: aer_layer=Transaction Layer, aer_agent=Receiver ID",
     "aer.c pci_print_aer(), 6.1, 6.6, today"),
    ("aer_firmware_first", f"amdgpu {GPU}: aer_uncor_severity: 0x00062030",
     "aer.c pci_print_aer(), uncorrectable only, 6.1, 6.6, today"),
    ("psp_cmd_status", f"amdgpu {GPU}: amdgpu: psp gfx command LOAD_TA(0x1) failed and "
     "response status is (0x7)", "amdgpu_psp.c psp_cmd_submit_buf(), 6.1, 6.6, today"),
]


@pytest.mark.parametrize(("name", "line", "origin"), WORDINGS,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(WORDINGS)])
def test_each_wording_is_its_class_on_its_own_line(name: str, line: str, origin: str):
    assert origin  # every fixture line says who prints it
    (event,) = parse(f"[  812.000001] {line}")
    assert event.event_class == name, (line, event.event_class)
    if GPU in line and "aer_" not in line:
        assert event.device == GPU  # the GPU itself, also when a port or a probe names it
    assert about_gpu(line)


def test_another_drivers_probe_failure_is_no_event():
    assert parse("nvme: probe of 0000:01:00.0 failed with error -5",
                 "nvme 0000:01:00.0: probe with driver nvme failed with error -5") == []


def test_media_rings_are_not_engine_failures():
    assert classify("ring vcn_unified_0 test failed (-110)").event_class.name == (
        "media_test_failed")
    assert classify("ring gfx_0.0.0 test failed (-110)").event_class.name == "ring_test_failed"


def test_benign_neighbours_of_the_new_wordings_are_no_events():
    # the success lines printed beside the failures (same functions)
    lines = [f"amdgpu {GPU}: amdgpu: SMU is resumed successfully!",
             f"amdgpu {GPU}: ring gfx_0.0.0 uses VM inv eng 0 on hub 0",
             f"amdgpu {GPU}: amdgpu: XGMI: Add node 3, hive 0x5f1d2c3b.",
             f"amdgpu {GPU}: amdgpu: Poison is created",
             f"amdgpu {GPU}: amdgpu: GPU reset(2) succeeded!",
             f"amdgpu {GPU}: amdgpu: MODE1 reset",
             f"pcieport {PORT}: AER: Correctable error message received from {GPU}",
             f"pcieport {PORT}: AER: Uncorrectable (Non-Fatal) error message received from {GPU}",
             f"amdgpu {GPU}: VM_CONTEXT1_PROTECTION_FAULT_ADDR   0x00001234"]
    assert parse(*lines) == []


def test_the_firmware_first_report_is_one_event_with_its_layer():
    # pci_print_aer(): status, the bits (__aer_print_error()), layer, uncorrectable severity
    (event,) = parse(f"amdgpu {GPU}: aer_status: 0x00004000, aer_mask: 0x00000000",
                     f"amdgpu {GPU}:    [14] CmpltTO                (First)",
                     f"amdgpu {GPU}: aer_layer=Transaction Layer, aer_agent=Requester ID",
                     f"amdgpu {GPU}: aer_uncor_severity: 0x00062030")
    assert (event.event_class, event.device, event.detail) == (
        "aer_firmware_first", GPU, "CmpltTO")


def test_the_unrolled_cheap_test_is_the_anchor_list():
    """about_gpu() and KernelLogParser.feed_all() spell ANCHORS out for speed: each anchor
    alone passes both, a line with none passes neither."""
    for anchor in ANCHORS:
        assert about_gpu(f"x {anchor} y"), anchor
        parser = KernelLogParser()
        list(parser.feed_all([f"x {anchor} y"]))
        assert parser.lines == 1
    assert not about_gpu("usb 1-4: new high-speed USB device number 3 using xhci_hcd")


def test_the_keys_cover_every_word():
    assert all(any(key in word for key in kernel_events.KEYS) for word in kernel_events.WORDS)
    assert len(kernel_events.KEYS) < len(kernel_events.WORDS)


def test_feed_all_is_feed_line_by_line():
    """The bulk path gives what feeding each line gives, on every corpus excerpt (held
    context lines, kmsg records, lines that are not about a GPU)."""
    from pathlib import Path

    corpus = Path(__file__).resolve().parent.parent / "fixtures" / "kernel-log" / "corpus"
    lines = [line for f in sorted(corpus.glob("*.log")) for line in f.read_text().splitlines()]
    lines += ["3,0,1000,-;amdgpu 0000:03:00.0: amdgpu: GPU reset begin!",
              "6,7,2000,-;usb 1-4: new high-speed USB device number 3 using xhci_hcd"]
    one, bulk = KernelLogParser(), KernelLogParser()
    each = [p for line in lines for p in one.feed(line)] + one.flush()
    assert list(bulk.feed_all(lines)) == each
    assert bulk.lines == one.lines == len(lines)


def test_the_anchors_hold_every_class_word():
    """The cheap test never rejects a line a class could match: on the catalogue's own
    sample lines (tests/preflight/test_events.py SYNTHETIC) and on the wordings above."""
    from tests.preflight.test_events import SYNTHETIC

    for name, line in SYNTHETIC.items():
        assert about_gpu(line), name
    assert "amdgpu" in ANCHORS


# ----- only kernel records are classified (issue 34 item 7) ---------------------------------

@pytest.mark.parametrize("line", [
    # logger(1) with the default tag, the user's name (RFC 3164 TAG)
    "Feb  2 08:03:20 gpu-node-7 root: amdgpu 0000:86:00.0: amdgpu: GPU reset begin!",
    "Feb  2 08:03:20 gpu-node-7 logger[4410]: GPU reset begin!",
    # rocmseat's own alert line in the journal (journalctl -b, short-iso)
    "2026-02-02T08:03:20+0100 gpu-node-7 rocmseat[812]: alert gpu_lost r1: amdgpu "
    "0000:86:00.0: amdgpu: device lost from bus!",
    # journalctl -o short-precise, short-full
    "Feb 02 08:03:20.123456 gpu-node-7 python3[99]: amdgpu 0000:86:00.0: amdgpu: GPU reset(1) "
    "failed",
    "Mon 2026-02-02 08:03:20 CET gpu-node-7 bash[1]: amdgpu 0000:86:00.0: Fatal error during "
    "GPU init",
    # a grep over /var/log/syslog
    "/var/log/syslog:Feb  2 08:03:20 gpu-node-7 su[5]: amdgpu 0000:86:00.0: amdgpu: GPU reset "
    "begin!",
])
def test_a_userspace_line_quoting_a_kernel_event_is_no_event(line: str):
    assert split_line(line) is None
    assert parse(line) == []


@pytest.mark.parametrize("line", [
    "Feb  2 08:03:20 gpu-node-7 kernel: amdgpu 0000:86:00.0: amdgpu: GPU reset begin!",
    "Feb  2 08:03:20 gpu-node-7 kernel: [ 8124.64] amdgpu 0000:86:00.0: amdgpu: GPU reset begin!",
    "2026-02-02T08:03:20.123456+01:00 gpu-node-7 kernel: amdgpu 0000:86:00.0: amdgpu: GPU reset "
    "begin!",
    "Mon 2026-02-02 08:03:20 CET gpu-node-7 kernel: amdgpu 0000:86:00.0: amdgpu: GPU reset begin!",
    "lut 02 08:03:20 gpu-node-7 kernel: amdgpu 0000:86:00.0: amdgpu: GPU reset begin!",
    "[  8124.640000] amdgpu 0000:86:00.0: amdgpu: GPU reset begin!",
    "3,812,8124640000,-;amdgpu 0000:86:00.0: amdgpu: GPU reset begin!",
])
def test_the_kernels_own_lines_are_events(line: str):
    (event,) = parse(line)
    assert (event.event_class, event.device) == ("gpu_reset", GPU)


def test_a_kmsg_record_of_another_facility_is_no_event():
    # printk.c devkmsg_write(): what userspace writes is LOG_USER (facility 1) unless it says
    # otherwise; 14 = user.info, 30 = daemon.info
    assert parse("14,5,10,-;amdgpu 0000:86:00.0: amdgpu: GPU reset begin!",
                 "30,6,11,-;amdgpu 0000:86:00.0: amdgpu: GPU reset begin!") == []
