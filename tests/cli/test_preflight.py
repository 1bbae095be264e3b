"""`rocmseat preflight` end to end on the fixture trees (in-process unless said otherwise)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO, skip_unless_nobody_reads_the_checkout
from tests.sysfs.conftest import SYSFS_FIXTURES

X99 = SYSFS_FIXTURES / "x99-r9700"
DEGRADED = SYSFS_FIXTURES / "x99-r9700-degraded"


@pytest.fixture
def copy_tree(tmp_path):
    def copy(name):
        dest = tmp_path / name
        shutil.copytree(SYSFS_FIXTURES / name, dest, symlinks=True)
        return dest

    return copy


@pytest.fixture
def preflight(rocmseat_cli, tmp_path):
    def run(root, *args):
        return rocmseat_cli(
            "preflight", "--sysfs-root", str(root), "--state-dir", str(tmp_path / "state"), *args
        )

    return run


def test_degraded_exits_1_naming_hop_badtlp_and_false_claim(preflight):
    result = preflight(DEGRADED)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert (
        "FAIL      pcie.link.degraded  0000:89:00.0               root port 0000:80:03.0 trained "
        "2.5 GT/s x16; both ends support 8 GT/s x16; the endpoint claims 32 GT/s x16 (what lspci "
        "on 0000:89:00.0 would falsely show)"
    ) in lines
    assert (
        "FAIL      aer.badtlp          0000:80:02.0               root port 0000:80:02.0 (path of "
        "GPU 0000:86:00.0): +6,655 BadTLP since boot (no reading of this boot is 24 h old yet)"
    ) in lines
    # GPU3's pp_dpm_pcie stars no row: pcie.dpm.unknown (issue 17), never ok
    assert lines[-1] == "result: 2 fail, 1 unknown, 0 warn, 15 ok -> exit 1"


def test_x99_exits_0_with_socket_local_pairs_noting_x8(preflight):
    result = preflight(X99)
    assert result.exit_code == 0, result.stdout
    assert (
        "  0000:05:00.0 + 0000:09:00.0  socket 0  (asymmetric: 8 GT/s x16 / 8 GT/s x8)"
        in result.stdout
    )
    assert "  0000:86:00.0 + 0000:89:00.0  socket 1  (symmetric)" in result.stdout
    assert "FAIL" not in result.stdout and "\x1b[" not in result.stdout
    assert (
        "the slot is x8 (the GPU could do x16): capability-limited by design, not a fault"
        in result.stdout
    )


@pytest.mark.parametrize("host", ["x99-r9700", "x99-r9700-degraded"])
def test_json_golden(preflight, golden, host):
    result = preflight(SYSFS_FIXTURES / host, "--json")
    doc = json.loads(result.stdout)
    assert doc["schema"] == "rocmseat.preflight/v1"
    assert doc["exit_code"] == result.exit_code
    golden(f"preflight-{host}.json", result.stdout)


def test_table_golden(preflight, golden):
    text = preflight(DEGRADED).stdout
    # issue 26: the worst first (the degraded link before the AER count), each problem's hint
    # on a line of its own under its message
    rows = [line.split()[:2] for line in text.splitlines() if line.startswith(("FAIL", "UNK"))]
    assert rows == [["FAIL", "pcie.link.degraded"], ["FAIL", "aer.badtlp"],
                    ["UNKNOWN", "pcie.dpm.unknown"]]
    assert text.count(" hint: ") == 3
    golden("preflight-x99-r9700-degraded.txt", text)


def test_textfile_golden_and_parsed_back(preflight, golden, tmp_path):
    out = tmp_path / "textfile"
    result = preflight(DEGRADED, "--textfile", str(out), "--json")
    assert result.exit_code == 1
    assert [p.name for p in out.iterdir()] == ["rocmseat_preflight.prom"]  # no temp file left
    text = (out / "rocmseat_preflight.prom").read_text()
    golden("preflight-x99-r9700-degraded.prom", text)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["rocmseat_preflight_exit_code"].samples[0].value == 1
    findings = {
        s.labels["severity"]: s.value for s in families["rocmseat_preflight_findings"].samples
    }
    assert findings == {"ok": 15, "warn": 0, "fail": 2, "unknown": 1}
    speeds = {
        (s.labels["pci_address"], s.labels["kind"]): s.value
        for s in families["rocmseat_gpu_pcie_link_speed_gts"].samples
    }
    assert speeds[("0000:89:00.0", "effective")] == 2.5
    assert speeds[("0000:89:00.0", "endpoint_claimed")] == 32.0
    severity = {
        (s.labels["check_id"], s.labels["subject"]): s.value
        for s in families["rocmseat_preflight_check_severity"].samples
    }
    assert severity[("aer.badtlp", "0000:80:02.0")] == 3
    aer = {
        (s.labels["function"], s.labels["kind"]): s.value
        for s in families["rocmseat_pcie_aer_errors"].samples
    }
    assert aer[("0000:80:02.0", "correctable")] == 6655


@pytest.mark.tools
def test_textfile_promtool_check(preflight, tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    preflight(DEGRADED, "--textfile", str(tmp_path / "t"))
    proc = subprocess.run(
        [promtool, "check", "metrics"],
        input=(tmp_path / "t/rocmseat_preflight.prom").read_text(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_amdgpu_one_line_exit_2(preflight):
    result = preflight(SYSFS_FIXTURES / "no-amdgpu")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"rocmseat: error: no amdgpu device under {SYSFS_FIXTURES / 'no-amdgpu' / 'class' / 'drm'} "
        "(found card0 0000:03:00.0 1a03:2000 ast)"
    ]


def test_missing_sysfs_root_says_so(preflight, tmp_path):
    result = preflight(tmp_path / "sys-typo")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"rocmseat: error: {tmp_path / 'sys-typo'}: no such directory (the sysfs root to read)\n"
    )


def test_profile_that_is_not_utf8_is_one_line(preflight, tmp_path):
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'name = "x"\n# caf\xe9\n')
    result = preflight(X99, "--profile", str(bad))
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == f"rocmseat: error: {bad}:2: not UTF-8 text (byte 16)\n"


def test_pair_restricts_gpus_and_accepts_short_addresses(preflight):
    result = preflight(X99, "--pair", "09:00.0,05:00.0", "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    subjects = {f["subject"] for f in doc["findings"]}
    assert "0000:86:00.0" not in subjects and "0000:89:00.0" not in subjects
    assert doc["pairs"]["requested"] == [["0000:05:00.0", "0000:09:00.0"]]
    assert [g["pci_address"] for g in doc["gpus"] if g["checked"]] == [
        "0000:05:00.0",
        "0000:09:00.0",
    ]


def test_pair_across_sockets_fails(preflight):
    result = preflight(X99, "--pair", "05:00.0,86:00.0", "--only", "numa")
    assert result.exit_code == 1
    assert "numa.pair.cross_socket" in result.stdout


def test_pair_with_missing_gpu_fails(preflight):
    result = preflight(X99, "--pair", "05:00.0,42:00.0", "--json")
    assert result.exit_code == 1
    checks = {(f["check_id"], f["subject"]) for f in json.loads(result.stdout)["findings"]}
    assert ("inventory.gpu_missing", "0000:42:00.0") in checks


@pytest.mark.parametrize("bad", ["05:00.0", "05:00.0,zz", "05:00.0,05:00.0", "a,b,c"])
def test_bad_pair_is_a_usage_error(preflight, bad):
    result = preflight(X99, "--pair", bad)
    assert result.exit_code == 2
    assert "--pair" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("family", "exit_code", "failing"),
    [("aer", 1, {"aer.badtlp"}), ("pcie", 1, {"pcie.link.degraded"}), ("numa", 0, set())],
)
def test_only_one_family(preflight, tmp_path, family, exit_code, failing):
    result = preflight(DEGRADED, "--only", family, "--json")
    doc = json.loads(result.stdout)
    assert result.exit_code == exit_code
    assert {f["check_id"].split(".")[0] for f in doc["findings"]} == {family}
    assert {f["check_id"] for f in doc["findings"] if f["severity"] == "fail"} == failing
    # only the aer family reads or writes the error readings
    assert (tmp_path / "state/preflight/error-readings.json").exists() == (family == "aer")


def test_strict_turns_warnings_into_1(preflight):
    root = SYSFS_FIXTURES / "single-socket-numa-unknown"
    assert preflight(root).exit_code == 0
    assert preflight(root, "--strict").exit_code == 1


def test_profile_option(preflight):
    result = preflight(X99, "--profile", str(REPO / "checks/x99-r9700.toml"))
    assert result.exit_code == 0 and "profile.gpu.present" in result.stdout
    assert preflight(DEGRADED, "--profile", str(REPO / "checks/x99-r9700.toml")).exit_code == 1


def test_bad_profile_one_line_exit_2(preflight, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[gpu]]\npci_address = "nope"\n')
    result = preflight(X99, "--profile", str(bad))
    assert result.exit_code == 2
    assert (
        result.stderr
        == f"rocmseat: error: {bad}:2: key 'gpu[0].pci_address': not a PCI address: 'nope'\n"
    )


def test_second_run_judges_the_same_window(preflight):
    # issue 17: the window is fixed in time (the last 24 h), not "since the last run": a
    # second look must not clear what the first found
    assert preflight(DEGRADED).exit_code == 1
    second = preflight(DEGRADED, "--json")
    assert second.exit_code == 1
    doc = json.loads(second.stdout)
    assert doc["aer_window"] == "since boot (no reading of this boot is 24 h old yet)"
    assert [f["data"]["delta"] for f in doc["findings"] if f["check_id"] == "aer.badtlp"] == [6655]


def test_hip_family_unknown_when_probe_module_unavailable(preflight, monkeypatch):
    monkeypatch.setitem(sys.modules, "rocmseat.hip.check", None)
    result = preflight(X99, "--hip", "--json")
    assert result.exit_code == 2
    (hip,) = [f for f in json.loads(result.stdout)["findings"] if f["check_id"].startswith("hip")]
    assert hip["severity"] == "unknown"
    assert hip["message"].startswith("the HIP probe module is unavailable")


def test_hip_gets_pairs(preflight, monkeypatch):
    import types

    from rocmseat.findings import Finding, Severity

    calls = []

    def hip_findings(pairs, *, env=None, stage_timeout_s=30.0, library=None):
        calls.append(list(pairs))
        return [Finding("hip.ipc", Severity.OK, f"{a}+{b}", "ok") for a, b in pairs]

    monkeypatch.setitem(
        sys.modules, "rocmseat.hip.check", types.SimpleNamespace(hip_findings=hip_findings)
    )
    assert preflight(X99, "--hip").exit_code == 0
    assert preflight(X99, "--only", "hip", "--pair", "86:00.0,89:00.0").exit_code == 0
    assert preflight(X99).exit_code == 0  # no --hip: not called
    assert calls == [
        [("0000:05:00.0", "0000:09:00.0"), ("0000:86:00.0", "0000:89:00.0")],
        [("0000:86:00.0", "0000:89:00.0")],
    ]


def test_plain_preflight_imports_no_hip_rich_pydantic_httpx(tmp_path):
    code = (
        "import sys; from rocmseat.cli.main import main; "
        f"rc = main(['preflight', '--sysfs-root', {str(X99)!r}, "
        f"'--state-dir', {str(tmp_path)!r}, '--json']); "
        "heavy = [m for m in ('rocmseat.hip', 'rich', 'pydantic', 'httpx', 'prometheus_client', "
        "'tomllib', 'yaml') if m in sys.modules]; "
        "print(rc, heavy, file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == "0 []"


GARBAGE = ["", "\n", "garbage\n", "\xff\xfe\x00\x01", "-1\n", "99999999999999999999999\n"]
PATH_FILES = [
    "vendor",
    "device",
    "class",
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
    "numa_node",
    "local_cpulist",
    "aer_dev_correctable",
    "aer_dev_fatal",
    "aer_dev_nonfatal",
    "aer_rootport_total_err_cor",
    "aer_rootport_total_err_fatal",
    "pp_dpm_pcie",
    "pcie_replay_count",
    "gpu_busy_percent",
    "unique_id",
    "mem_info_vram_total",
    "product_name",
]


@pytest.mark.parametrize("name", PATH_FILES)
@pytest.mark.parametrize("garbage", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_in_every_parsed_file_never_crashes(
    rocmseat_cli, copy_tree, tmp_path, name, garbage
):
    root = copy_tree("x99-r9700-degraded")
    gpu = (root / "class/drm/card4/device").resolve()
    for directory in (gpu, *list(gpu.parents)[:3]):
        if (directory / name).exists():
            (directory / name).write_bytes(garbage.encode("latin-1"))
    result = rocmseat_cli(
        "preflight", "--sysfs-root", str(root), "--state-dir", str(tmp_path / "s"), "--json"
    )
    assert result.exit_code in (0, 1, 2), result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    if result.stdout:
        json.loads(result.stdout)
    else:
        assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "relpath",
    [
        "devices/system/node/node1/cpulist",
        "devices/system/node/node0/distance",
        "devices/system/cpu/cpu3/topology/physical_package_id",
        "class/kfd/kfd/topology/nodes/5/properties",
    ],
)
@pytest.mark.parametrize("garbage", GARBAGE[1:4], ids=range(3))
def test_garbage_in_node_files_never_crashes(rocmseat_cli, copy_tree, tmp_path, relpath, garbage):
    root = copy_tree("x99-r9700")
    (root / relpath).write_bytes(garbage.encode("latin-1"))
    result = rocmseat_cli(
        "preflight", "--sysfs-root", str(root), "--state-dir", str(tmp_path / "s"), "--json"
    )
    assert result.exit_code in (0, 1, 2)
    assert "internal error" not in result.stderr
    json.loads(result.stdout)


def test_missing_files_and_card_without_device(rocmseat_cli, copy_tree, tmp_path):
    root = copy_tree("x99-r9700")
    gpu = (root / "class/drm/card1/device").resolve()
    for name in ("current_link_speed", "numa_node", "aer_dev_correctable", "pp_dpm_pcie"):
        (gpu / name).unlink()
    ((root / "class/drm/card2").resolve() / "device").unlink()
    result = rocmseat_cli(
        "preflight", "--sysfs-root", str(root), "--state-dir", str(tmp_path / "s"), "--json"
    )
    doc = json.loads(result.stdout)
    assert result.exit_code == 2
    unknown = {(f["check_id"], f["subject"]) for f in doc["findings"] if f["severity"] == "unknown"}
    assert ("inventory.card", "card2") in unknown
    assert len(doc["gpus"]) == 3


def test_permission_denied_as_an_unprivileged_user():
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    skip_unless_nobody_reads_the_checkout()  # setpriv runs this checkout's code as nobody
    base = tempfile.mkdtemp(prefix="rocmseat-perm-")
    try:
        os.chmod(base, 0o755)
        root = os.path.join(base, "tree")
        shutil.copytree(X99, root, symlinks=True)
        rp = os.path.join(root, "devices/pci0000:00/0000:00:02.0")
        os.chmod(os.path.join(rp, "aer_dev_correctable"), 0)
        os.chmod(os.path.join(rp, "current_link_speed"), 0)
        # the GPU firmware would state the link too (issue 17): make it unreadable as well
        os.chmod(os.path.join(rp, "0000:03:00.0/0000:04:00.0/0000:05:00.0/pp_dpm_pcie"), 0)
        state = os.path.join(base, "state")
        os.mkdir(state)
        os.chmod(state, stat.S_IRWXU | stat.S_IRWXG | stat.S_IRWXO)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMSEAT_")}
        env["ROCMSEAT_ERROR_LOG"] = os.path.join(state, "error.log")
        env["HOME"] = state
        # nobody cannot read a site-packages under a 0700 /root (pyenv): give it a readable
        # copy of the one third-party package the JSON path imports
        import click

        pkgs = os.path.join(base, "pkgs")
        shutil.copytree(os.path.dirname(click.__file__), os.path.join(pkgs, "click"))
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), pkgs])
        code = "import sys; from rocmseat.cli.main import main; main()"
        proc = subprocess.run(
            [
                setpriv,
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                sys.executable,
                "-c",
                code,
                "preflight",
                "--sysfs-root",
                root,
                "--state-dir",
                state,
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=base,
        )
        assert proc.returncode == 2, proc.stderr
        doc = json.loads(proc.stdout)
        unknown = [f for f in doc["findings"] if f["severity"] == "unknown"]
        assert {f["check_id"] for f in unknown} == {
            "pcie.link.unknown", "pcie.dpm.unknown", "aer.unknown",
        }
        assert all("Permission denied" in f["message"] for f in unknown)
        assert "current_link_speed: Permission denied" in unknown[0]["message"]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_sample_window(preflight):
    doc = json.loads(preflight(DEGRADED, "--sample", "0", "--json").stdout)
    assert doc["aer_window"] == "during the 0 s sample"
    assert not [f for f in doc["findings"] if f["check_id"] == "aer.badtlp"]  # nothing new


def test_unwritable_textfile_dir_is_one_line(preflight, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = preflight(X99, "--textfile", str(blocker / "dir"))
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"rocmseat: error: {blocker / 'dir' / 'rocmseat_preflight.prom'}: "
    )
    assert "cannot write the textfile" in result.stderr and len(result.stderr.splitlines()) == 1
    # nothing lost: the report is printed all the same
    assert result.stdout.splitlines()[-1] == "result: 0 fail, 0 unknown, 0 warn, 18 ok -> exit 0"


def test_unwritable_textfile_keeps_the_findings_and_exit_1(preflight, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = preflight(DEGRADED, "--textfile", str(blocker / "dir"), "--json")
    # this run's BadTLP must reach the operator whatever happens to the textfile
    assert result.exit_code == 1  # a known problem outranks the textfile failure
    checks = {f["check_id"] for f in json.loads(result.stdout)["findings"]}
    assert {"aer.badtlp", "pcie.link.degraded"} <= checks
    assert len(result.stderr.splitlines()) == 1 and "cannot write the textfile" in result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--sample", "-1"], "Invalid value for '--sample': -1.0 is not in the range"),
        (["--sample", "soon"], "Invalid value for '--sample'"),
        (["--only", "pcei"], "Invalid value for '--only': 'pcei' is not one of"),
        (["--pair", "05:00.0;09:00.0"], "Invalid value for '--pair': --pair '05:00.0;09:00.0'"),
    ],
)
def test_bad_options_name_the_option_exit_2(preflight, args, needle):
    result = preflight(X99, *args)
    assert result.exit_code == 2 and result.stdout == ""
    assert needle in result.stderr and "Traceback" not in result.stderr


def test_state_dir_that_is_a_file_is_a_usage_error(rocmseat_cli, tmp_path):
    blocker = tmp_path / "state"
    blocker.write_text("")
    result = rocmseat_cli("preflight", "--sysfs-root", str(X99), "--state-dir", str(blocker))
    assert result.exit_code == 2 and result.stdout == ""
    assert f"Invalid value for '--state-dir': Directory '{blocker}' is a file." in result.stderr


def test_only_profile_without_profile_is_one_line_exit_2(preflight):
    result = preflight(X99, "--only", "profile")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        "rocmseat: error: the profile family needs an expectations profile (--profile FILE)\n"
    )


def test_profile_typo_names_file_line_key(preflight, tmp_path):
    typo = tmp_path / "typo.toml"
    typo.write_text('name = "x"\n\n[[gpu]]\npci_adress = "05:00.0"\n')
    result = preflight(X99, "--profile", str(typo))
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == f"rocmseat: error: {typo}:4: key 'gpu[0].pci_adress': unknown key\n"


def test_torn_baseline_file_is_a_warning_not_a_crash(preflight, tmp_path):
    baseline = tmp_path / "state/preflight/error-readings.json"
    baseline.parent.mkdir(parents=True)
    baseline.write_bytes(b"\x80\x81{half")
    result = preflight(DEGRADED, "--json")
    assert result.exit_code == 1 and "internal error" not in result.stderr
    doc = json.loads(result.stdout)
    (warn,) = [f for f in doc["findings"] if f["check_id"] == "aer.window"]
    assert warn["message"].startswith(f"{baseline}: ")
    assert doc["aer_window"].startswith("since boot")
    # and the run replaced it with a good one
    assert json.loads(baseline.read_text())["schema"] == "rocmseat.error-readings/v1"


def test_no_device_and_unwritable_textfile_says_both(preflight, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = preflight(SYSFS_FIXTURES / "no-amdgpu", "--textfile", str(blocker / "dir"))
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 2
    assert "cannot write the textfile" in lines[0]
    assert lines[1].startswith("rocmseat: error: no amdgpu device under ")


def test_no_device_still_refreshes_the_textfile(preflight, tmp_path):
    out = tmp_path / "tf"
    assert preflight(X99, "--textfile", str(out)).exit_code == 0
    assert preflight(SYSFS_FIXTURES / "no-amdgpu", "--textfile", str(out)).exit_code == 2
    families = list(text_string_to_metric_families((out / "rocmseat_preflight.prom").read_text()))
    assert [(f.name, f.samples[0].value) for f in families] == [("rocmseat_preflight_exit_code", 2)]


# ----- issue 11: hostile inputs (each test failed before its fix) -----------------------------
GPU3_REL = "devices/pci0000:80/0000:80:03.0/0000:87:00.0/0000:88:00.0/0000:89:00.0"


@pytest.mark.parametrize("how", ["garbage", "empty", "directory", "dangling"])
def test_garbage_vendor_never_hides_the_gpu_or_its_degraded_link(preflight, copy_tree, how):
    # before: "3 AMD GPUs", no pcie.link.degraded, exit 0 (once the BadTLP was baselined)
    root = copy_tree("x99-r9700-degraded")
    vendor = root / GPU3_REL / "vendor"
    if how == "garbage":
        vendor.write_text("garbage\n")
    elif how == "empty":
        vendor.write_text("")
    elif how == "directory":
        vendor.unlink()
        vendor.mkdir()
    else:
        vendor.unlink()
        vendor.symlink_to(root / GPU3_REL / "nowhere")
    preflight(root)  # a first run: its reading joins the error readings
    result = preflight(root, "--json")
    doc = json.loads(result.stdout)
    assert len(doc["gpus"]) == 4
    findings = {(f["check_id"], f["subject"]): f for f in doc["findings"]}
    assert findings[("pcie.link.degraded", "0000:89:00.0")]["severity"] == "fail"
    unknown = findings[("inventory.gpu.identity", "0000:89:00.0")]
    assert unknown["severity"] == "unknown" and str(vendor) in unknown["message"]
    assert result.exit_code == 1  # the degraded link outranks the unreadable file


def test_garbage_vendor_on_a_healthy_node_is_unknown_exit_2(preflight, copy_tree):
    root = copy_tree("x99-r9700")
    (root / GPU3_REL / "vendor").write_text("0xzz\n")
    result = preflight(root)
    assert result.exit_code == 2
    assert result.stdout.startswith("rocmseat preflight: 4 AMD GPUs, 2 socket(s)\n")
    assert (
        f"UNKNOWN   inventory.gpu.identity  0000:89:00.0               cannot read the GPU's "
        f"identity: {root / GPU3_REL / 'vendor'}: not a 0x-prefixed hex id: '0xzz\\n'"
    ) in result.stdout


def test_card_that_cannot_be_identified_is_unknown_naming_it(preflight, copy_tree):
    root = copy_tree("x99-r9700")
    (root / GPU3_REL / "vendor").write_text("garbage\n")
    (root / GPU3_REL / "driver").unlink()
    props = root / "class/kfd/kfd/topology/nodes/5/properties"
    props.write_text(props.read_text().replace("simd_count 128", "simd_count 0"))
    result = preflight(root, "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    (card,) = [f for f in doc["findings"] if f["check_id"] == "inventory.card"]
    assert card["subject"] == "card4" and card["severity"] == "unknown"
    assert "cannot tell whether 0000:89:00.0 is an AMD GPU" in card["message"]


def _limit_memory():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def _run_bounded(argv, timeout=60):
    """A child `rocmseat` with a deadline and 1 GiB of address space: a regression to a hang or
    to reading /dev/zero fails here instead of hanging the suite or exhausting the host."""
    code = "import sys; from rocmseat.cli.main import main; main()"
    # no ROCMSEAT_* from the caller, but the crash log stays where conftest put it (tmp)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMSEAT_")}
    env["ROCMSEAT_ERROR_LOG"] = os.environ["ROCMSEAT_ERROR_LOG"]
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=str(REPO),
        preexec_fn=_limit_memory,
    )


def test_fifo_attribute_does_not_hang(copy_tree, tmp_path):
    # before: open() of the FIFO blocked forever (the CLI hung until killed)
    # the degraded tree: GPU3's firmware stars no row, so its link files decide (issue 17)
    root = copy_tree("x99-r9700-degraded")
    attr = root / GPU3_REL / "current_link_speed"
    attr.unlink()
    os.mkfifo(attr)
    proc = _run_bounded(
        ["preflight", "--sysfs-root", str(root), "--state-dir", str(tmp_path / "s"), "--json"],
        timeout=30,
    )
    assert proc.returncode == 1, proc.stderr  # the degraded tree fails; it did not hang
    doc = json.loads(proc.stdout)
    (unknown,) = [f for f in doc["findings"] if f["check_id"] == "pcie.link.unknown"]
    assert unknown["subject"] == "0000:89:00.0"
    assert f"{attr}: is a FIFO, not a regular file" in unknown["message"]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_profile_that_is_not_a_regular_file_is_one_line_exit_2(tmp_path, kind):
    # before: a FIFO hung the reader; /dev/zero read until memory ran out (1.9 GB and more)
    if kind == "fifo":
        profile = tmp_path / "p.toml"
        os.mkfifo(profile)
        why = "is a FIFO, not a regular file"
    else:
        profile = tmp_path / "p.toml"
        profile.symlink_to("/dev/zero")
        why = "is a character device, not a regular file"
    proc = _run_bounded(
        ["preflight", "--sysfs-root", str(X99), "--state-dir", str(tmp_path / "s"),
         "--profile", str(profile)],
        timeout=30,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"rocmseat: error: {profile}: cannot read the profile: {why}\n"


def test_textfile_aer_totals_are_exact_integer_counters(preflight, copy_tree, tmp_path):
    # before: "{value:g}" printed 1234567 as 1.23457e+06 (a counter off by 33)
    root = copy_tree("x99-r9700-degraded")
    rp = root / "devices/pci0000:80/0000:80:02.0"
    text = (rp / "aer_dev_correctable").read_text()
    (rp / "aer_dev_correctable").write_text(
        text.replace("BadTLP 6655", "BadTLP 1234567").replace("TOTAL_ERR_COR 6655",
                                                              "TOTAL_ERR_COR 1234567")
    )
    out = tmp_path / "tf"
    preflight(root, "--textfile", str(out), "--json")
    prom = (out / "rocmseat_preflight.prom").read_text()
    assert "1.23457e+06" not in prom
    assert "# TYPE rocmseat_pcie_aer_errors_total counter" in prom
    assert (
        'rocmseat_pcie_aer_errors_total{function="0000:80:02.0",gpu="0000:86:00.0",'
        'kind="correctable"} 1.234567e+06'
    ) in prom  # prometheus_client's Go-style float: every digit kept
    families = {f.name: f for f in text_string_to_metric_families(prom)}
    assert families["rocmseat_pcie_aer_errors"].type == "counter"
    totals = {
        (s.labels["function"], s.labels["kind"]): s.value
        for s in families["rocmseat_pcie_aer_errors"].samples
        if s.name == "rocmseat_pcie_aer_errors_total"
    }
    assert totals[("0000:80:02.0", "correctable")] == 1234567


# --- issue 19: output that fits a terminal ------------------------------------------------
def test_problems_fit_80_columns(preflight, golden, monkeypatch):
    """`--problems`: only what is not ok at 80 columns (the full table took 115 lines at 80
    columns for this tree), the ok findings folded into a count. Issue 26: the worst first (the
    degraded link before the AER count), each problem's message on a line of its own with its
    figure kept (`trained 2.5 GT/s x16` was cut to `2.5 GT/s...`), its hint under it, wrapped."""
    monkeypatch.setenv("COLUMNS", "80")
    result = preflight(DEGRADED, "--problems")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    heads = [line.split(" ", 2)[:2] for line in lines if not line.startswith(" ")][1:4]
    assert heads == [["FAIL", "pcie.link.degraded"], ["FAIL", "aer.badtlp"],
                     ["UNKNOWN", "pcie.dpm.unknown"]]
    assert lines[1:4] == [
        "FAIL pcie.link.degraded 0000:89:00.0",
        "    root port 0000:80:03.0 trained 2.5 GT/s x16; both ends support 8 GT/s x16",
        "    hint: reseat the GPU and its riser/cable, check the slot's BIOS link speed"]
    assert sum(line.startswith("    hint: ") for line in lines) == 3
    assert lines[-2:] == ["(15 ok not shown)",
                          "result: 2 fail, 1 unknown, 0 warn, 15 ok -> exit 1"]
    golden("preflight-x99-r9700-degraded-problems.txt", result.stdout)


def test_problems_on_a_healthy_node_and_a_wide_terminal(preflight, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert preflight(X99, "--problems").stdout.splitlines()[1:] == [
        "no problems (18 ok)", "result: 0 fail, 0 unknown, 0 warn, 18 ok -> exit 0"]


@pytest.mark.parametrize("fmt", [["--json"], ["--format", "npd"], ["--format", "json"]])
def test_problems_is_a_table(preflight, fmt):
    result = preflight(X99, "--problems", *fmt)
    assert result.exit_code == 2 and result.stdout == ""
    assert "--problems is a table of the problems" in result.stderr


@pytest.mark.parametrize("case", ["no-amdgpu", "bad-profile", "missing-root"])
def test_json_prints_a_document_when_it_could_not_check(rocmseat_cli, tmp_path, case):
    """Issue 19: `--json` on the no-amdgpu tree printed nothing; now a document with `schema` and
    `error`, the exit code unchanged."""
    root, extra = SYSFS_FIXTURES / "no-amdgpu", []
    if case == "bad-profile":
        root, extra = X99, ["--profile", str(tmp_path / "nope.toml")]
    elif case == "missing-root":
        root = tmp_path / "no-such-root"
    result = rocmseat_cli("preflight", "--sysfs-root", str(root), "--state-dir",
                          str(tmp_path / "s"), "--json", *extra)
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["schema"] == "rocmseat.preflight/v1" and doc["exit_code"] == 2
    assert doc["error"] and result.stderr.startswith(f"rocmseat: error: {doc['error']}\n")
    assert set(doc) == {"schema", "exit_code", "error", "hint"}


def test_a_textfile_dir_that_did_not_exist_is_a_warning(preflight, tmp_path):
    """First-day trap: `--textfile /var/lib/node_exporter/textfile` on Debian, whose
    node_exporter reads /var/lib/prometheus/node-exporter, was created silently (exit 0)."""
    target = tmp_path / "var/lib/node_exporter/textfile"
    result = preflight(X99, "--textfile", str(target))
    assert result.exit_code == 0
    assert result.stderr == (
        f"rocmseat: warning: {target} did not exist and was created: node_exporter reads only "
        "its --collector.textfile.directory (Debian/Ubuntu: /var/lib/prometheus/node-exporter)\n")
    assert (target / "rocmseat_preflight.prom").is_file()
    again = preflight(X99, "--textfile", str(target))
    assert (again.exit_code, again.stderr) == (0, "")


def test_sample_progress_on_a_terminal_only():
    import io
    import time

    from rich.console import Console

    from rocmseat.cli.preflight import _sleep_with_progress

    out = io.StringIO()
    start = time.monotonic()
    _sleep_with_progress(0.6, console=Console(file=out, force_terminal=True, width=80))
    assert time.monotonic() - start >= 0.6
    assert "AER sample: run a load now" in out.getvalue()


def _on_a_terminal(args, columns, tmp_path):
    """`rocmseat preflight ARGS` as its own process with stdout on a pseudo-terminal of
    `columns` columns; what it printed."""
    import pty

    primary, secondary = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "rocmseat", "preflight", *args,
                             "--state-dir", str(tmp_path / "s")], stdout=secondary,
                            stderr=subprocess.DEVNULL, env=env, cwd=REPO)
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    assert proc.wait(timeout=60) == 1
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode().replace("\r\n", "\n"))


def test_a_narrow_terminal_gets_the_problems_a_wide_one_the_table(tmp_path):
    narrow = _on_a_terminal(["--sysfs-root", str(DEGRADED)], 80, tmp_path)
    assert narrow.splitlines()[-1] == "(a narrow terminal: --format table for the full table)"
    # the title, three problems of a head, a message and a wrapped hint each, the counts
    assert len(narrow.splitlines()) == 16, narrow
    wide = _on_a_terminal(["--sysfs-root", str(DEGRADED)], 200, tmp_path)
    assert "ENDPOINT" in wide and "narrow terminal" not in wide
    forced = _on_a_terminal(["--sysfs-root", str(DEGRADED), "--format", "table"], 80, tmp_path)
    assert "ENDPOINT" in forced


def test_write_profile_round_trip(rocmseat_cli, tmp_path):
    """`--write-profile` on the healthy hive, then that profile on the degraded hive: the xgmi
    failures of the inactive links (exit 1); on the degraded hive it writes nothing (exit 2)."""
    profile = tmp_path / "hive.toml"
    wrote = rocmseat_cli("preflight", "--sysfs-root", str(SYSFS_FIXTURES / "mi300x-hive"),
                         "--state-dir", str(tmp_path / "s1"), "--write-profile", str(profile),
                         "--json")
    assert wrote.exit_code == 0, wrote.stderr
    assert f"rocmseat: wrote the profile {profile}" in wrote.stderr
    judged = rocmseat_cli("preflight", "--sysfs-root",
                          str(SYSFS_FIXTURES / "mi300x-hive-degraded"), "--state-dir",
                          str(tmp_path / "s2"), "--profile", str(profile), "--json")
    assert judged.exit_code == 1
    failing = {(f["check_id"], f["subject"]) for f in json.loads(judged.stdout)["findings"]
               if f["severity"] == "fail"}
    assert failing == {("xgmi.link", "0000:22:00.0"), ("xgmi.link", "0000:38:00.0"),
                       ("xgmi.link", "0000:5c:00.0")}
    refused = rocmseat_cli("preflight", "--sysfs-root",
                           str(SYSFS_FIXTURES / "mi300x-hive-degraded"), "--state-dir",
                           str(tmp_path / "s3"), "--write-profile", str(tmp_path / "no.toml"))
    assert refused.exit_code == 2 and "writes from a healthy node" in refused.stderr
    assert not (tmp_path / "no.toml").exists()
