from __future__ import annotations

import json
import re

import pytest

from rocmseat.errors import ConfigError, NoDeviceError
from rocmseat.launch.plan import (
    HIP_ORDER_ASSUMED,
    HIP_ORDER_PROBED,
    KeyStatus,
    engine_argv,
    plan_replicas,
)
from rocmseat.launch.planview import argv_lines
from rocmseat.node.inventory import read_inventory
from rocmseat.preflight.pairs import propose_pairs
from rocmseat.seat.load import load_seat
from tests.conftest import FIXTURES, REPO

SYSFS = FIXTURES / "sysfs"
R9700 = (REPO / "launchers" / "r9700-mxfp4-dflash.toml").read_text()
DEMO = (REPO / "launchers" / "demo-cpu.toml").read_text()


def seat_from(tmp_path, text, name="seat.toml"):
    (tmp_path / "checks").mkdir(exist_ok=True)
    path = tmp_path / "launchers" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return load_seat(path)


def plans_for(seat, host="x99-r9700", **kw):
    inventory = read_inventory(SYSFS / host)
    return plan_replicas(seat, inventory, propose_pairs(inventory), **kw)


def test_r9700_two_socket_local_replicas(tmp_path):
    seat = seat_from(tmp_path, R9700)
    r0, r1 = plans_for(seat, numactl="/usr/bin/numactl")
    assert (r0.replica, r0.pci_pair, r0.binding.numa_node) == ("r0", ("0000:05:00.0",
                                                                      "0000:09:00.0"), 0)
    assert (r1.replica, r1.pci_pair, r1.binding.numa_node) == ("r1", ("0000:86:00.0",
                                                                      "0000:89:00.0"), 1)
    assert (r0.hip_indices, r1.hip_indices) == ((0, 1), (2, 3))
    assert r0.hip_index_source == HIP_ORDER_ASSUMED
    assert r0.env["HIP_VISIBLE_DEVICES"] == "0,1" and r1.env["HIP_VISIBLE_DEVICES"] == "2,3"
    assert r0.argv[:3] == ("/usr/bin/numactl", "--cpunodebind=0", "--membind=0")
    assert r1.argv[:3] == ("/usr/bin/numactl", "--cpunodebind=1", "--membind=1")
    assert (r0.port, r1.port) == (8000, 8001)
    assert r0.env["VLLM_CACHE_ROOT"] == "/var/cache/rocmseat/r9700-mxfp4-dflash/r0/vllm"
    assert r0.env["NCCL_PROTO"] == "Simple"
    argv = r0.engine_argv
    assert argv[:3] == ("vllm", "serve", "/models/qwen3.8-27b-mxfp4")
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {
        "method": "dflash", "model": "/models/qwen3.8-27b-dflash-fp8",
        "num_speculative_tokens": 7,
        "num_speculative_tokens_per_batch_size": [[1, 2, 7], [3, 4, 3], [5, 1024, 0]],
        "draft_tensor_parallel_size": 1,
    }
    for flag, value in [("--tensor-parallel-size", "2"), ("--served-model-name", "qwen"),
                        ("--max-model-len", "262144"), ("--max-num-seqs", "8"),
                        ("--max-num-batched-tokens", "8192"),
                        ("--gpu-memory-utilization", "0.97"), ("--dtype", "auto"),
                        ("--port", "8000"), ("--host", "127.0.0.1")]:
        assert argv[argv.index(flag) + 1] == value
    assert argv[-1] == "--enable-prefix-caching"
    assert "--quantization" not in argv


def test_without_numactl_the_node_cpus_are_the_affinity(tmp_path):
    seat = seat_from(tmp_path, R9700)
    r0, r1 = plans_for(seat, numactl=None)
    assert r0.binding.method == "cpu-affinity"
    assert r0.binding.cpulist == "0-13,28-41"
    assert r0.binding.cpus == (*range(0, 14), *range(28, 42))
    assert r1.binding.cpus == (*range(14, 28), *range(42, 56))
    assert r0.argv == r0.engine_argv


def test_probed_hip_indices_win(tmp_path):
    seat = seat_from(tmp_path, R9700)
    probed = {"0000:05:00.0": 3, "0000:09:00.0": 2, "0000:86:00.0": 1, "0000:89:00.0": 0}
    r0, _ = plans_for(seat, numactl=None, hip_index_by_pci=probed)
    assert r0.hip_indices == (3, 2) and r0.hip_index_source == HIP_ORDER_PROBED
    assert r0.env["HIP_VISIBLE_DEVICES"] == "3,2"


def test_numa_unknown_is_not_bound(tmp_path):
    seat = seat_from(tmp_path, R9700.replace('names = ["r0", "r1"]', ""))
    [r0] = plans_for(seat, host="single-socket-numa-unknown", numactl="/usr/bin/numactl")
    assert r0.binding.method == "none" and r0.binding.numa_node is None
    assert "not bound" in r0.binding.note
    assert r0.argv == r0.engine_argv  # no numactl prefix without a node


def test_more_pairs_than_names_is_a_config_error(tmp_path):
    seat = seat_from(tmp_path, R9700)
    # the wording after the key is the seat room's; the file, line and key are the planner's
    with pytest.raises(ConfigError, match=r"seat\.toml:\d+: key 'replicas\.names': .*\b2 "
                                          r"name.* for 4 replicas"):
        plans_for(seat, host="mi300x-8gpu", numactl=None)


def test_no_gpu_is_no_device(tmp_path):
    seat = seat_from(tmp_path, R9700)
    with pytest.raises(NoDeviceError):
        plans_for(seat, host="no-amdgpu", numactl=None)


def test_explicit_pair_not_on_the_node(tmp_path):
    text = R9700.replace('mode = "auto"', 'mode = "explicit"\npairs = [["0000:05:00.0", '
                         '"0000:09:00.0"], ["0000:86:00.0", "0000:aa:00.0"]]')
    seat = seat_from(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        plans_for(seat, numactl=None)
    assert re.search(r"seat.toml:\d+: key 'replicas.pairs\[1\]': GPU 0000:aa:00.0 is not in the "
                     r"inventory", info.value.message)


@pytest.mark.parametrize("name", ["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                  "CUDA_VISIBLE_DEVICES"])
def test_seat_must_not_select_devices(tmp_path, name):
    seat = seat_from(tmp_path, R9700.replace('NCCL_PROTO = "Simple"',
                                             f'NCCL_PROTO = "Simple"\n{name} = "0,1"'))
    with pytest.raises(ConfigError, match=rf"key 'env.{name}': is set per replica"):
        plans_for(seat, numactl=None)


def test_cpu_seat_has_no_gpu_no_tp_no_binding(tmp_path):
    seat = seat_from(tmp_path, DEMO)
    [r0] = plan_replicas(seat, None, (), numactl="/usr/bin/numactl",
                         keys={"r0": KeyStatus(None, "unknown: test")})
    assert r0.pci_pair == () and r0.hip_indices == ()
    assert "HIP_VISIBLE_DEVICES" not in r0.env
    assert r0.binding.method == "none"
    assert "--tensor-parallel-size" not in r0.argv
    assert "--gpu-memory-utilization" not in r0.argv
    assert r0.argv[:4] == ("/opt/rocmseat/vllm-venv/bin/python", "-m",
                           "vllm.entrypoints.openai.api_server", "--model")
    assert r0.key.reason == "unknown: test"
    assert r0.probe_url == "http://127.0.0.1:8100"


def test_quantization_and_no_drafter(tmp_path):
    text = DEMO.replace('dtype = "bfloat16"', 'dtype = "bfloat16"\nquantization = "fp8"')
    text = re.sub(r"\[drafter\]\n(.*\n){3}", "", text)
    seat = seat_from(tmp_path, text)
    argv = engine_argv(seat, 9000)
    assert argv[argv.index("--quantization") + 1] == "fp8"
    assert "--speculative-config" not in argv


def test_probe_url_of_wildcard_hosts(tmp_path):
    seat = seat_from(tmp_path, DEMO.replace('host = "127.0.0.1"', 'host = "0.0.0.0"'))
    [r0] = plan_replicas(seat, None, (), numactl=None)
    assert r0.probe_url == "http://127.0.0.1:8100"


def test_argv_lines_keep_flags_with_values():
    assert argv_lines(["numactl", "--cpunodebind=0", "--membind=0", "vllm", "serve", "/m",
                       "--port", "8000", "--enable-prefix-caching", "--x", "a b"]) == [
        "numactl", "--cpunodebind=0", "--membind=0", "vllm serve /m", "--port 8000",
        "--enable-prefix-caching", "--x 'a b'"]


def test_hip_probe_order_replaces_the_assumption(tmp_path):
    from rocmseat.findings import Finding, Severity
    from rocmseat.launch.plan import probed_hip_order, with_probed_hip_indices

    seat = seat_from(tmp_path, R9700)
    r0, r1 = plans_for(seat, numactl=None)
    devices = ["0000:86:00.0", "0000:89:00.0", "0000:05:00.0", "0000:09:00.0"]
    findings = [
        Finding("hip.ipc", Severity.OK, "x", "ok", data={"devices": ["bogus"]}),
        Finding("hip.runtime", Severity.OK, "0000:05:00.0+0000:09:00.0", "HIP runtime",
                data={"devices": devices}),
    ]
    order = probed_hip_order(findings)
    assert order == {"0000:86:00.0": 0, "0000:89:00.0": 1, "0000:05:00.0": 2, "0000:09:00.0": 3}
    probed = with_probed_hip_indices(r0, order)
    assert probed.hip_indices == (2, 3) and probed.hip_index_source == HIP_ORDER_PROBED
    assert probed.env["HIP_VISIBLE_DEVICES"] == "2,3"
    # a probe that did not see the pair changes nothing; an unknown runtime gives no order
    assert with_probed_hip_indices(r1, {"0000:86:00.0": 0}) is r1
    assert probed_hip_order([Finding("hip.runtime", Severity.UNKNOWN, "x", "no runtime")]) is None
