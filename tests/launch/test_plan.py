from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rocmseat.errors import NoDeviceError
from rocmseat.launch.plan import (
    HIP_ORDER_ASSUMED,
    HIP_ORDER_PROBED,
    KeyStatus,
    engine_argv,
    engine_env,
    plan_replicas,
)
from rocmseat.launch.planview import argv_lines, plan_json, plan_text
from rocmseat.node.inventory import read_inventory
from rocmseat.placement.resolve import probed_numbering, resolve
from tests.placement.test_placement import DEMO, R9700, SYSFS, seat_from


def plans_for(seat, host="x99-r9700", numbering=None, **kw):
    inventory = read_inventory(SYSFS / host) if host is not None else None
    records = resolve(seat, inventory, state_root=Path("/srv/state"), numbering=numbering)
    return plan_replicas(seat, records, **kw)


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
    assert argv[:3] == ("/opt/vllm/bin/vllm", "serve", "/models/qwen3.8-27b-mxfp4")
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {
        "method": "dflash", "model": "/models/qwen3.8-27b-dflash-fp8",
        "num_speculative_tokens": 7,
        "num_speculative_tokens_per_batch_size": [[1, 2, 7], [3, 4, 3], [5, 1024, 1]],
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
    probed = probed_numbering(["0000:89:00.0", "0000:86:00.0", "0000:09:00.0", "0000:05:00.0"])
    r0, _ = plans_for(seat, numactl=None, numbering=probed)
    assert r0.hip_indices == (3, 2) and r0.hip_index_source == HIP_ORDER_PROBED
    assert r0.env["HIP_VISIBLE_DEVICES"] == "3,2"


def test_numa_unknown_is_not_bound(tmp_path):
    seat = seat_from(tmp_path, R9700.replace('names = ["r0", "r1"]', ""))
    [r0] = plans_for(seat, host="single-socket-numa-unknown", numactl="/usr/bin/numactl")
    assert r0.binding.method == "none" and r0.binding.numa_node is None
    assert "not bound" in r0.binding.note
    assert r0.argv == r0.engine_argv  # no numactl prefix without a node


def test_no_gpu_is_no_device(tmp_path):
    seat = seat_from(tmp_path, R9700)
    with pytest.raises(NoDeviceError):
        plans_for(seat, host="no-amdgpu", numactl=None)


def test_cpu_seat_has_no_gpu_no_tp_no_binding(tmp_path):
    seat = seat_from(tmp_path, DEMO)
    [r0] = plans_for(seat, host=None, numactl="/usr/bin/numactl",
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
    [r0] = plans_for(seat, host=None, numactl=None)
    assert r0.probe_url == "http://127.0.0.1:8100"


def test_argv_lines_keep_flags_with_values():
    assert argv_lines(["numactl", "--cpunodebind=0", "--membind=0", "vllm", "serve", "/m",
                       "--port", "8000", "--enable-prefix-caching", "--x", "a b"]) == [
        "numactl", "--cpunodebind=0", "--membind=0", "vllm serve /m", "--port 8000",
        "--enable-prefix-caching", "--x 'a b'"]


def test_secrets_never_reach_the_dry_run(tmp_path):
    """Issue 11: `--api-key sk-...` in extra_args and a token in [env] are redacted in both
    renderings of the plan (they leave the process); the engine itself gets them."""
    text = R9700.replace('extra_args = ["--enable-prefix-caching"]',
                         'extra_args = ["--enable-prefix-caching", "--api-key", "sk-live-123"]')
    text = text.replace('NCCL_PROTO = "Simple"', 'NCCL_PROTO = "Simple"\nHF_TOKEN = "hf_secret_9"')
    text = text.replace("neutral = []", 'neutral = ["HF_TOKEN"]')
    seat = seat_from(tmp_path, text)
    plans = plans_for(seat, numactl=None)
    assert plans[0].argv[-1] == "sk-live-123" and plans[0].env["HF_TOKEN"] == "hf_secret_9"
    shown = json.dumps(plan_json(seat, plans)) + plan_text(seat, plans)
    assert "sk-live-123" not in shown and "hf_secret_9" not in shown
    assert '"--api-key", "<redacted>"' in json.dumps(plan_json(seat, plans))
    assert "HF_TOKEN='<redacted>'" in plan_text(seat, plans)


def test_engine_env_drops_inherited_hip_masks_and_keeps_rocr(tmp_path):
    """vLLM asserts an inherited CUDA_VISIBLE_DEVICES equals HIP_VISIBLE_DEVICES
    (vllm/platforms/rocm.py): the plan's mask is the only HIP-level one; ROCr's stays."""
    seat = seat_from(tmp_path, R9700)
    _, r1 = plans_for(seat, numactl=None)
    env = engine_env({"CUDA_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0,1",
                      "ROCR_VISIBLE_DEVICES": "0,1,2,3", "NOTIFY_SOCKET": "@x", "PATH": "/bin"},
                     r1)
    assert "CUDA_VISIBLE_DEVICES" not in env and "NOTIFY_SOCKET" not in env
    assert env["HIP_VISIBLE_DEVICES"] == "2,3" and env["ROCR_VISIBLE_DEVICES"] == "0,1,2,3"
    assert env["PATH"] == "/bin"
