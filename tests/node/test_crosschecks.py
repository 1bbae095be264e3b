"""udev and amdsmi cross-checks: fakes for udev, a real child process for amdsmi."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmseat.findings import Severity
from rocmseat.node.amdsmi_check import amdsmi_findings, compare_amdsmi
from rocmseat.node.inventory import read_inventory
from rocmseat.node.udev import compare_udev, udev_card_addresses
from rocmseat.runner import run
from tests.sysfs.conftest import SYSFS_FIXTURES

X99 = SYSFS_FIXTURES / "x99-r9700"


class FakeDevice:
    def __init__(self, name, parent):
        self.sys_name = name
        self._parent = parent

    def find_parent(self, subsystem):
        assert subsystem == "pci"
        return None if self._parent is None else FakeDevice(self._parent, None)


class FakeContext:
    def __init__(self, devices):
        self.devices = devices

    def list_devices(self, subsystem):
        assert subsystem == "drm"
        return self.devices


def test_udev_agrees_and_disagrees():
    inv = read_inventory(X99)
    devices = [FakeDevice(f"card{i + 1}", g.pci_address) for i, g in enumerate(inv.gpus)]
    devices += [FakeDevice("renderD128", "0000:05:00.0"), FakeDevice("card1-DP-1", None)]
    cards = udev_card_addresses(FakeContext(devices))
    assert cards == {
        "card1": "0000:05:00.0",
        "card2": "0000:09:00.0",
        "card3": "0000:86:00.0",
        "card4": "0000:89:00.0",
    }
    (ok,) = compare_udev(inv, cards)
    assert ok.severity == Severity.OK
    cards["card2"] = "0000:0a:00.0"
    (bad,) = compare_udev(inv, cards)
    assert bad.severity == Severity.WARN and bad.subject == "0000:09:00.0"


def test_udev_failure_is_a_reason():
    class Broken:
        def list_devices(self, subsystem):
            raise OSError("libudev.so.1: cannot open")

    reason = udev_card_addresses(Broken())
    assert reason.startswith("udev enumeration failed: OSError")
    assert compare_udev(read_inventory(X99), reason)[0].severity == Severity.WARN


def _report(inv, **override):
    gpus = []
    for g in inv.gpus:
        entry = {
            "bdf": g.pci_address,
            "numa_affinity": g.numa_node_raw,
            "pcie": {
                "pcie_static": {"max_pcie_speed": 32000, "max_pcie_width": 16},
                "pcie_metric": {
                    "pcie_speed": 8000,
                    "pcie_width": 8 if g.pci_address == "0000:09:00.0" else 16,
                },
            },
            "replay": 0,
        }
        entry.update(override.get(g.pci_address, {}))
        gpus.append(entry)
    return {"gpus": gpus}


def test_compare_amdsmi_agrees_and_notes_static_overreport():
    inv = read_inventory(X99)
    findings = compare_amdsmi(inv, _report(inv))
    assert {f.severity for f in findings} == {Severity.OK}
    assert "inherits the internal-switch over-report" in findings[0].message


def test_compare_amdsmi_disagreements():
    inv = read_inventory(X99)
    report = _report(inv, **{"0000:86:00.0": {"numa_affinity": 0}})
    report["gpus"] = [e for e in report["gpus"] if e["bdf"] != "0000:05:00.0"]
    report["gpus"].append({"bdf": "0000:c1:00.0"})
    findings = compare_amdsmi(inv, report)
    warns = {(f.subject, f.message.split(";")[0]) for f in findings if f.severity == Severity.WARN}
    assert ("0000:05:00.0", "sysfs lists this GPU") in {(s, m.split(";")[0]) for s, m in warns}
    assert any(s == "0000:c1:00.0" for s, _ in warns)
    assert any(s == "0000:86:00.0" and "NUMA affinity 0" in m for s, m in warns)


def test_compare_amdsmi_error_is_unknown():
    (finding,) = compare_amdsmi(read_inventory(X99), {"error": "KeyError: 'libamd_smi.so'"})
    assert finding.severity == Severity.UNKNOWN
    assert "KeyError: 'libamd_smi.so'" in finding.message


def _fake_amdsmi(tmp_path, body):
    pkg = tmp_path / "fake" / "amdsmi"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(body))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "fake"), *sys.path])
    return env


def test_probe_silences_pypi_amdsmi_prints(tmp_path):
    # What the PyPI wheel does without ROCm: print to stdout, then KeyError on import.
    env = _fake_amdsmi(
        tmp_path,
        """
        print("/opt/rocm/lib/libamd_smi.so: cannot open shared object file")
        print("Unable to find libamd_smi.so library try installing amd-smi-lib")
        raise KeyError("libamd_smi.so")
    """,
    )
    done = run([sys.executable, "-m", "rocmseat.node.amdsmi_probe"], env=env, timeout_s=60)
    assert json.loads(done.stdout) == {"error": "KeyError: 'libamd_smi.so'"}
    assert "Unable to find libamd_smi.so" in done.stderr
    (finding,) = amdsmi_findings(read_inventory(X99), env=env)
    assert finding.severity == Severity.UNKNOWN and "KeyError" in finding.message


def test_probe_with_a_working_amdsmi(tmp_path):
    env = _fake_amdsmi(
        tmp_path,
        """
        print("chatty import")
        def amdsmi_init(): pass
        def amdsmi_shut_down(): pass
        def amdsmi_get_processor_handles():
            return ["0000:05:00.0", "0000:09:00.0", "0000:86:00.0", "0000:89:00.0"]
        def amdsmi_get_gpu_device_bdf(h): return h
        def amdsmi_get_gpu_topo_numa_affinity(h): return 0 if h < "0000:80" else 1
        def amdsmi_get_pcie_info(h):
            width = 8 if h == "0000:09:00.0" else 16
            return {"pcie_static": {"max_pcie_speed": 32000, "max_pcie_width": 16},
                    "pcie_metric": {"pcie_speed": 8000, "pcie_width": width}}
        def amdsmi_get_gpu_pci_replay_counter(h): raise RuntimeError("not supported")
    """,
    )
    findings = amdsmi_findings(read_inventory(X99), env=env)
    assert [f.severity for f in findings] == [Severity.OK] * 4
    assert "gpu_metrics link 8 GT/s x8 agrees" in findings[1].message


def test_probe_without_amdsmi_installed_is_unknown():
    if importlib.util.find_spec("amdsmi") is not None:
        pytest.skip("amdsmi is installed here; the fake-module tests cover the failure path")
    (finding,) = amdsmi_findings(read_inventory(X99))
    assert finding.severity == Severity.UNKNOWN
    assert "ModuleNotFoundError: No module named 'amdsmi'" in finding.message


def test_probe_timeout_and_garbage_are_unknown():
    from rocmseat.runner import Completed

    def hung(argv, **kwargs):
        return Completed(tuple(argv), -9, "", "", timed_out=True)

    def garbage(argv, **kwargs):
        return Completed(tuple(argv), 1, "not json", "Segmentation fault")

    inv = read_inventory(X99)
    assert "did not answer" in amdsmi_findings(inv, runner=hung)[0].message
    (finding,) = amdsmi_findings(inv, runner=garbage)
    assert finding.severity == Severity.UNKNOWN and "Segmentation fault" in finding.message


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "gpus",
                    "bdf",
                    "numa_affinity",
                    "pcie",
                    "pcie_static",
                    "pcie_metric",
                    "max_pcie_speed",
                    "max_pcie_width",
                    "pcie_speed",
                    "pcie_width",
                    "replay",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=20,
)
_INV = read_inventory(X99)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.dictionaries(st.sampled_from(["gpus", "error"]), _JSON, max_size=2),
        st.fixed_dictionaries({"error": st.text(max_size=40)}),
        st.fixed_dictionaries(
            {
                "gpus": st.lists(
                    st.fixed_dictionaries(
                        {"bdf": st.sampled_from([g.pci_address for g in _INV.gpus]) | _JSON},
                        optional={"numa_affinity": _JSON, "pcie": _JSON, "replay": _JSON},
                    ),
                    max_size=5,
                )
            }
        ),
    )
)
def test_hypothesis_any_probe_report_gives_findings(report):
    """Whatever amdsmi's probe printed (a JSON object), the comparison gives findings, one line
    each, and never raises."""
    findings = compare_amdsmi(_INV, report)
    assert findings
    assert all("\n" not in f.message for f in findings)
