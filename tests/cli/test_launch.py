"""`rocmseat launch`: the dry-run plan (golden), usage errors, and whole launches of a cpu seat
whose engine command is the TEST ENGINE (tests/launch/testengine.py, not vLLM) or a program
that never becomes healthy. The config key is real: it asks the engine Python for its versions
(a fake that answers only the version probe)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

import rocmseat.launch.flow
from tests.conftest import FIXTURES, REPO, write_fake_engine_python
from tests.launch.test_supervise import Datagrams, alive, free_port, wait_for_file

R9700 = "launchers/r9700-mxfp4-dflash.toml"
X99 = str(FIXTURES / "sysfs" / "x99-r9700")
TEST_ENGINE = REPO / "tests" / "launch" / "testengine.py"
# The config key asks the engine's Python for versions; these launches run
# tests/launch/testengine.py, so a fake that answers only the version probe is all they
# need (no venv at a fixed path).
ENGINE_PYTHON = write_fake_engine_python(Path(tempfile.mkdtemp(prefix="rocmseat-fake-engine-")))


def normalise(text: str) -> str:
    return text.replace(str(REPO), "<repo>")


@pytest.fixture(autouse=True)
def _no_inherited_masks(monkeypatch):
    # the dry run numbers GPUs after the environment's ROCR_VISIBLE_DEVICES, as launch does
    for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def no_numactl(monkeypatch):
    monkeypatch.setattr(rocmseat.launch.flow, "find_numactl", lambda: None)


# What launch would stop at on this machine, where the flagship seat's engine, its Python and
# its models are not installed (issue 26: the dry run exited 0 over all of this)
R9700_ABSENT = [
    "engine.command: '/opt/vllm/bin/vllm' is not an executable file",
    "engine.python: '/opt/vllm/bin/python' is not an executable file",
    "model.path: /models/qwen3.8-27b-mxfp4 does not exist",
    "drafter.path: /models/qwen3.8-27b-dflash-fp8 does not exist",
    "replica r0: config key unknown: /opt/vllm/bin/python exited 127: /opt/vllm/bin/python: "
    "command not found",
    "replica r1: config key unknown: /opt/vllm/bin/python exited 127: /opt/vllm/bin/python: "
    "command not found",
]


def absent_lines(problems):
    return "".join(f"rocmseat: launch would refuse to start (exit 2): {p}\n" for p in problems)


def test_dry_run_r9700_text(rocmseat_cli, golden, no_numactl, monkeypatch):
    monkeypatch.chdir(REPO)
    result = rocmseat_cli("launch", R9700, "--dry-run", "--sysfs-root", X99)
    # a lint for CI: the exit status launch would have, every reason named
    assert result.exit_code == 2, result.stderr
    assert result.stderr == absent_lines(R9700_ABSENT)
    out = result.stdout
    assert "replica r0\n  gpus        {0000:05:00.0, 0000:09:00.0}" in out
    assert "  numa        bound to node 0 (cpus 0-13,28-41)" in out
    assert "replica r1\n  gpus        {0000:86:00.0, 0000:89:00.0}" in out
    assert "  numa        bound to node 1 (cpus 14-27,42-55)" in out
    assert "config key  unknown: /opt/vllm/bin/python exited 127" in out
    golden("launch-r9700-dry-run.txt", normalise(out))


def test_dry_run_numbers_after_an_inherited_rocr_mask(rocmseat_cli, no_numactl, monkeypatch):
    """A Slurm job or a container runtime may set ROCR_VISIBLE_DEVICES: HIP's numbering (and
    so each replica's HIP_VISIBLE_DEVICES) is then relative to ROCr's selection."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "2,3")
    result = rocmseat_cli("launch", R9700, "--dry-run", "--json", "--sysfs-root", X99)
    # Review of issue 10: the dry run exited 0 while showing r0, which launch refuses (exit 2:
    # HIP cannot see its GPUs under ROCR_VISIBLE_DEVICES); it exits as launch would, and says so
    assert result.exit_code == 2, result.stderr
    assert result.stderr == ("rocmseat: replica r0: launch would refuse to start it (exit 2): "
                             "HIP does not see 0000:05:00.0, 0000:09:00.0 (indices by PCI bus "
                             "order, assumed, after ROCR_VISIBLE_DEVICES=2,3; HIP sees: "
                             "0000:86:00.0, 0000:89:00.0)\n") + absent_lines(R9700_ABSENT)
    r0, r1 = json.loads(result.stdout)["replicas"]
    assert r1["hip_indices"] == [0, 1] and r1["env"]["HIP_VISIBLE_DEVICES"] == "0,1"
    assert r1["refused"] is None
    assert r0["hip_indices"] is None and "HIP_VISIBLE_DEVICES" not in r0["env"]
    assert r0["hip_note"].startswith("HIP does not see 0000:05:00.0, 0000:09:00.0 (indices by "
                                     "PCI bus order, assumed, after ROCR_VISIBLE_DEVICES=2,3")
    assert r0["refused"] == {"exit_code": 2, "reason": r0["hip_note"]}
    text = rocmseat_cli("launch", R9700, "--dry-run", "--sysfs-root", X99)
    assert text.exit_code == 2
    assert "-> HIP_VISIBLE_DEVICES unknown: HIP does not see" in text.stdout
    assert "(launch refuses to start it)" in text.stdout


def test_port_past_65535_is_one_line_naming_port_base(rocmseat_cli, tmp_path):
    """Issue 10: an auto seat with a high port_base planned and rendered r1 on port 65536."""
    seat = tmp_path / "seat.toml"
    text = (REPO / R9700).read_text().replace("port_base = 8000", "port_base = 65535")
    seat.write_text(text.replace('names = ["r0", "r1"]', "").replace(
        '"../checks/x99-r9700.toml"', json.dumps(str(REPO / "checks" / "x99-r9700.toml"))))
    line = next(i for i, x in enumerate(seat.read_text().splitlines(), 1)
                if x.startswith("port_base"))
    for args in (("launch", str(seat), "--dry-run"),
                 ("systemd", "render", str(seat), "--out", str(tmp_path / "u"),
                  "--rocmseat-bin", "/usr/local/bin/rocmseat")):
        result = rocmseat_cli(*args, "--sysfs-root", X99, "--state-dir", str(tmp_path / "s"))
        assert result.exit_code == 2
        assert result.stderr.splitlines()[0] == (
            f"rocmseat: error: {seat}:{line}: key 'serve.port_base': replica r1 (index 1) would "
            "listen on port 65536: 65535 + 1 is past 65535")
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "u").exists()


def test_dry_run_r9700_json_with_numactl(rocmseat_cli, golden, monkeypatch):
    monkeypatch.setattr(rocmseat.launch.flow, "find_numactl", lambda: "/usr/bin/numactl")
    monkeypatch.chdir(REPO)
    result = rocmseat_cli("launch", R9700, "--dry-run", "--json", "--sysfs-root", X99)
    assert result.exit_code == 2, result.stderr
    assert result.stderr == absent_lines(R9700_ABSENT)
    doc = json.loads(result.stdout)
    assert doc["schema"] == "rocmseat.launch-plan/v1"
    r0, r1 = doc["replicas"]
    assert r0["argv"][:3] == ["/usr/bin/numactl", "--cpunodebind=0", "--membind=0"]
    assert r1["argv"][:3] == ["/usr/bin/numactl", "--cpunodebind=1", "--membind=1"]
    assert r0["key"]["digest"] is None and r0["key"]["reason"].startswith("unknown: ")
    golden("launch-r9700-dry-run.json", normalise(result.stdout))


def test_dry_run_cpu_seat_reads_no_sysfs(rocmseat_cli):
    # the autouse guard makes the default /sys raise: a cpu seat must not need it
    result = rocmseat_cli("launch", str(REPO / "launchers" / "demo-cpu.toml"), "--dry-run")
    models = Path("/var/tmp/rocmseat-demo/models")
    absent = [f"{key}.path: {models / name} does not exist"
              for key, name in (("model", "target"), ("drafter", "drafter"))
              if not (models / name).exists()]
    if not (models / "target").exists():  # its config.json is a factor of the key
        absent.append(f"replica r0: config key unknown: {models / 'target'}: No such file or "
                      "directory")
    assert result.exit_code == (2 if absent else 0), result.stderr
    assert result.stderr == absent_lines(absent)
    assert "gpus        none (backend cpu)" in result.stdout
    assert "HIP_VISIBLE_DEVICES" not in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((R9700,), "give exactly one of --replica NAME and --dry-run"),
        ((R9700, "--dry-run", "--replica", "r0"), "give exactly one of"),
        ((R9700, "--replica", "r0", "--json"), "--json goes with --dry-run"),
    ],
)
def test_usage_errors(rocmseat_cli, monkeypatch, args, message):
    monkeypatch.chdir(REPO)
    result = rocmseat_cli("launch", *args, "--sysfs-root", X99)
    assert result.exit_code == 2
    assert message in result.stderr


def test_bad_seat_file_names_file_and_key(rocmseat_cli, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text((REPO / "launchers" / "demo-cpu.toml").read_text().replace(
        "max_num_seqs = 4", "max_num_seqs = -4"))
    result = rocmseat_cli("launch", str(bad), "--dry-run")
    assert result.exit_code == 2
    assert f"{bad}:" in result.stderr and "serve.max_num_seqs" in result.stderr


def test_unknown_replica(rocmseat_cli, monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    result = rocmseat_cli("launch", R9700, "--replica", "r7", "--sysfs-root", X99,
                          "--state-dir", str(tmp_path))
    assert result.exit_code == 2  # a usage/config error, not a refused start
    assert result.stderr == ("rocmseat: error: --replica 'r7': no such replica in this seat "
                             "(replicas: r0, r1)\n")


def test_preflight_only_cli(rocmseat_cli, monkeypatch, tmp_path):
    """The replica unit's ExecStartPre=: exit 1 naming the finding on a degraded pair, 0 on a
    healthy one (one summary line)."""
    monkeypatch.chdir(REPO)
    refused = rocmseat_cli("launch", R9700, "--replica", "r1", "--preflight-only",
                           "--sysfs-root", str(FIXTURES / "sysfs" / "x99-r9700-degraded"),
                           "--state-dir", str(tmp_path))
    assert refused.exit_code == 1
    assert ("rocmseat: error: replica r1: start refused by preflight: pcie.link.degraded "
            "0000:89:00.0: ") in refused.stderr
    ok = rocmseat_cli("launch", R9700, "--replica", "r0", "--preflight-only", "--sysfs-root",
                      X99, "--state-dir", str(tmp_path))
    assert ok.exit_code == 0, ok.stderr
    assert "rocmseat: replica r0: sysfs preflight of 0000:05:00.0, 0000:09:00.0: " in ok.stderr
    usage = rocmseat_cli("launch", R9700, "--dry-run", "--preflight-only", "--sysfs-root", X99)
    assert usage.exit_code == 2 and "--preflight-only goes with --replica NAME" in usage.stderr


A, B, C, D = "0000:05:00.0", "0000:09:00.0", "0000:86:00.0", "0000:89:00.0"


def record_both(state: Path) -> None:
    """What launch leaves when r0 and r1 ran on the whole node: their placement.json."""
    from rocmseat.placement.recorded import write_recorded
    from rocmseat.seat.load import load_seat

    for record in rocmseat.launch.flow.place_for_launch(load_seat(REPO / R9700), Path(X99),
                                             state_dir=state).records:
        write_recorded(record)


def test_unit_pins_keep_each_replica_on_its_own_pair(rocmseat_cli, monkeypatch, tmp_path):
    """Review of issue 10, defect 1: with 09:00.0 gone, r0 was placed on (86, 89), r1's GPUs,
    and r1's unit failed "no such replica". The units pin each replica's pair (--pair, fixed at
    render time): r0 is refused naming the missing GPU (exit 1), r1 still runs its preflight
    on its own pair."""
    from tests.placement.test_placement import lost_tree

    monkeypatch.chdir(REPO)
    lost, state = lost_tree(tmp_path), tmp_path / "state"
    r0 = rocmseat_cli("launch", R9700, "--replica", "r0", "--pair", f"{A},{B}",
                      "--preflight-only", "--sysfs-root", str(lost), "--state-dir", str(state))
    assert r0.exit_code == 1, r0.stderr
    assert r0.stderr.splitlines()[0] == (
        "rocmseat: error: replica r0 of seat r9700-mxfp4-dflash: start refused: GPU "
        f"{B} of replica r0's pair ({A}, {B}) is not on this node (no such card under {lost})")
    assert not (state / "seats").exists()  # refused before anything is touched
    r1 = rocmseat_cli("launch", R9700, "--replica", "r1", "--pair", f"{C},{D}",
                      "--preflight-only", "--sysfs-root", str(lost), "--state-dir", str(state))
    assert r1.exit_code == 0, r1.stderr
    assert f"rocmseat: replica r1: sysfs preflight of {C}, {D}: " in r1.stderr
    # a pin that is not the replica's pair in an explicit seat: the units are out of date
    usage = rocmseat_cli("launch", R9700, "--replica", "r1", "--pair", "nope",
                         "--preflight-only", "--sysfs-root", str(lost))
    assert usage.exit_code == 2 and "--pair" in usage.stderr


def test_a_pin_is_one_pair_whatever_order_it_is_written_in(rocmseat_cli, monkeypatch, tmp_path):
    """Issue 16: `--pair` was parsed twice, sorted once: preflight sorted it, launch did not, so
    `launch --pair 09:00.0,05:00.0` refused r0 ("its unit pins the pair 0000:09:00.0,
    0000:05:00.0 but the seat places it on 0000:05:00.0, 0000:09:00.0"). One parser, sorted."""
    monkeypatch.chdir(REPO)
    for pin in (f"{A},{B}", f"{B},{A}", "09:00.0, 05:00.0"):
        result = rocmseat_cli("launch", R9700, "--replica", "r0", "--pair", pin,
                              "--preflight-only", "--sysfs-root", X99, "--state-dir",
                              str(tmp_path / "state"))
        assert result.exit_code == 0, (pin, result.stderr)
        assert f"rocmseat: replica r0: sysfs preflight of {A}, {B}: " in result.stderr
    same = rocmseat_cli("launch", R9700, "--replica", "r0", "--pair", f"{A},0000:05:00.0",
                        "--preflight-only", "--sysfs-root", X99)
    assert same.exit_code == 2 and "a pair needs two different GPUs" in same.stderr


def test_recorded_pairs_hold_without_a_pin(rocmseat_cli, monkeypatch, tmp_path):
    """Started by hand (no --pair), each replica's placement.json is its identity: the dry run
    on the node that lost 09:00.0 shows r0 refused (exit 1, naming the GPU) and r1 on its own
    pair and port; launch refuses r0 before anything is touched."""
    from tests.placement.test_placement import lost_tree

    monkeypatch.chdir(REPO)
    lost, state = lost_tree(tmp_path), tmp_path / "state"
    record_both(state)
    result = rocmseat_cli("launch", R9700, "--dry-run", "--json", "--sysfs-root", str(lost),
                          "--state-dir", str(state))
    assert result.exit_code == 1, result.stderr
    r0, r1 = json.loads(result.stdout)["replicas"]
    why = (f"GPU {B} of replica r0's pair ({A}, {B}) is not on this node (no such card under "
           f"{lost})")
    assert (r0["replica"], r0["pci_pair"], r0["refused"]) == (
        "r0", [A, B], {"exit_code": 1, "reason": why})
    assert (r1["replica"], r1["pci_pair"], r1["port"], r1["refused"]) == ("r1", [C, D], 8001,
                                                                          None)
    assert r1["cache_dir"].endswith("/r9700-mxfp4-dflash/r1")
    assert f"rocmseat: replica r0: launch would refuse to start it (exit 1): {why}" in (
        result.stderr)
    before = sorted(p.name for p in (state / "seats" / "r9700-mxfp4-dflash" / "r0").iterdir())
    launch = rocmseat_cli("launch", R9700, "--replica", "r0", "--sysfs-root", str(lost),
                          "--state-dir", str(state))
    assert launch.exit_code == 1 and why in launch.stderr
    assert sorted(p.name for p in (state / "seats" / "r9700-mxfp4-dflash" / "r0").iterdir()) == (
        before)


def test_a_replica_with_no_pair_left_is_refused_not_shifted(rocmseat_cli, monkeypatch, tmp_path):
    """r1 recorded, r0 never launched here, 09:00.0 gone: the node's one pair is r1's, so r0
    has none; it is refused (exit 1), never given r1's pair."""
    from tests.placement.test_placement import lost_tree

    monkeypatch.chdir(REPO)
    lost, state = lost_tree(tmp_path), tmp_path / "state"
    record_both(state)
    (state / "seats" / "r9700-mxfp4-dflash" / "r0" / "placement.json").unlink()
    result = rocmseat_cli("launch", R9700, "--replica", "r0", "--preflight-only",
                          "--sysfs-root", str(lost), "--state-dir", str(state))
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == (
        "rocmseat: error: replica r0 of seat r9700-mxfp4-dflash: start refused: this node has "
        f"no socket-local GPU pair for it (the node's pairs: r1 on {C}, {D})")


def test_rocm_seat_on_a_tree_without_gpus_names_the_root(rocmseat_cli, monkeypatch):
    monkeypatch.chdir(REPO)
    root = FIXTURES / "sysfs" / "no-amdgpu"
    result = rocmseat_cli("launch", R9700, "--dry-run", "--sysfs-root", str(root))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"rocmseat: error: no AMD GPU under {root}/class/drm ")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t, p: t.replace(f'state_dir = "{p / "state"}"', f'state_dir = "{p / "file"}"'),
         "state dir {p}/file: cannot make {p}/file/seats/test-cpu/r0: {p}/file: is a file "
         "where a directory should be"),
        (lambda t, p: t.replace(f'cache_root = "{p / "cache"}"', f'cache_root = "{p / "file"}"'),
         "cache_root {p}/file: not a directory"),
        (lambda t, p: t.replace("command = [", 'command = ["/nonexistent/vllm", '),
         "engine.command: '/nonexistent/vllm' is not an executable file"),
        (lambda t, p: t.replace("command = [", 'command = ["no-such-engine-x", '),
         "engine.command: 'no-such-engine-x' is not an executable on PATH"),
        (lambda t, p: t.replace(f'python = "{ENGINE_PYTHON}"', 'python = "/nonexistent/python"'),
         "engine.python: '/nonexistent/python' is not an executable file"),
    ],
    ids=["state-dir-is-a-file", "cache-root-is-a-file", "engine-path-absent",
         "engine-not-on-path", "engine-python-absent"],
)
def test_bad_launch_inputs_are_one_line_config_errors(rocmseat_cli, tmp_path, edit, message):
    seat = write_seat(tmp_path, engine(), port=free_port())
    seat.write_text(edit(seat.read_text(), tmp_path))
    (tmp_path / "file").write_text("")
    result = rocmseat_cli("launch", str(seat), "--replica", "r0")
    assert result.exit_code == 2, result.stderr
    first = result.stderr.splitlines()[0]
    assert first == "rocmseat: error: " + message.format(p=tmp_path)
    assert not (tmp_path / "cache").exists() or message.startswith("cache_root")
    assert "Traceback" not in result.stderr


# ----- whole launches of a cpu seat ------------------------------------------------------
def write_seat(tmp_path: Path, command: list[str], *, port: int, timeout_s: float = 60,
               drafter_tokens: int = 3, expect: str = "") -> Path:
    models = tmp_path / "models"
    for name in ("target", "drafter"):
        (models / name).mkdir(parents=True, exist_ok=True)
        (models / name / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    seat = tmp_path / "seat.toml"
    seat.write_text(f"""
name = "test-cpu"
backend = "cpu"
tp = 1
cache_root = "{tmp_path / 'cache'}"
state_dir = "{tmp_path / 'state'}"

[engine]
command = {json.dumps(command)}
model_flag = "--model"
python = "{ENGINE_PYTHON}"

[model]
path = "{models / 'target'}"
served_name = "demo"

[drafter]
method = "draft_model"
path = "{models / 'drafter'}"
num_speculative_tokens = {drafter_tokens}

[serve]
port_base = {port}
max_model_len = 256
max_num_seqs = 4
dtype = "bfloat16"

[env]
VLLM_CPU_KVCACHE_SPACE = "1"

[preflight]
refuse_on_fail = false
hip = false

[readiness]
timeout_s = {timeout_s}
canary_max_tokens = 2
{expect}
""")
    return seat


def engine(*extra: str) -> list[str]:
    return [sys.executable, str(TEST_ENGINE), *extra]


def read_report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "state" / "seats" / "test-cpu" / "r0" /
                       "startup.json").read_text())


def test_launch_ready_report_and_engine_exit_status(rocmseat_cli, tmp_path):
    port = free_port()
    log = FIXTURES / "logs" / "cpu-0.32-fresh-draft-model.log"
    seat = write_seat(tmp_path, engine("--replay", str(log), "--exit-after-canary", "7"),
                      port=port)
    result = rocmseat_cli("launch", str(seat), "--replica", "r0")
    assert result.exit_code == 7, result.stderr
    assert "CPU KV cache size: 524,288 tokens" in result.stdout  # passed through
    assert "rocmseat: r0: new cache" in result.stderr
    assert "replica r0 ready in" in result.stderr
    assert "the engine exited with status 7 after" in result.stderr
    report = read_report(tmp_path)
    assert report["schema"] == "rocmseat.startup/v1"
    assert len(report["config_key"]["digest"]) == 64
    assert report["outcome"]["ready"] is True and report["outcome"]["exit_code"] == 7
    assert report["log"]["kv_cache_tokens"] == 524_288
    assert report["log"]["components"]["backbone"]["outcome"] == "fresh_compile"
    assert report["cache"]["moved_aside"] is None
    history = list((tmp_path / "state" / "seats" / "test-cpu" / "r0" / "history").glob("*.json"))
    assert len(history) == 1  # one entry per start (rewritten at exit)


def test_relaunch_after_key_change_judges_the_log(rocmseat_cli, tmp_path):
    """Start 1: a fresh compile, KV 524,288. Start 2 with another draft length: the key changes,
    the cache is moved aside, and the test engine replays a log with cache loads and a smaller
    KV pool: both judgements must fire and land in the report."""
    port = free_port()
    logs = FIXTURES / "logs"
    seat = write_seat(tmp_path, engine("--replay", str(logs / "cpu-0.32-fresh-draft-model.log"),
                                       "--exit-after-canary", "0"), port=port)
    first = rocmseat_cli("launch", str(seat), "--replica", "r0")
    assert first.exit_code == 0, first.stderr
    seat = write_seat(tmp_path, engine("--replay", str(logs / "musa-nonaot-hit-two-line-kv.log"),
                                       "--exit-after-canary", "0"), port=port, drafter_tokens=4,
                      expect='[[expect_log]]\npattern = "experts resident"\nseverity = "fail"\n')
    second = rocmseat_cli("launch", str(seat), "--replica", "r0")
    assert second.exit_code == 0, second.stderr
    assert "moved cache aside to" in second.stderr
    assert "speculative.num_speculative_tokens" in second.stderr
    assert "WARNING: the invalidation hit a warm cache" in second.stderr
    assert "KV pool shrank" in second.stderr
    report = read_report(tmp_path)
    ids = {f["check_id"]: f for f in report["findings"]}
    assert ids["launch.cache.warm_after_invalidation"]["severity"] == "warn"
    shrunk = ids["launch.kv.shrunk"]
    assert shrunk["data"]["previous_kv_cache_tokens"] == 524_288
    assert shrunk["data"]["kv_cache_tokens"] == 98_304
    assert "KV pool shrank 81.2%: 98,304 tokens now, 524,288 at the previous start" in (
        shrunk["message"])
    assert ids["launch.drafter.loaded"]["severity"] == "warn"
    assert ids["launch.expect_log"]["severity"] == "fail"
    assert report["cache"]["moved_aside"].startswith(str(tmp_path / "cache" / "r0.stale-"))
    assert report["cache"]["changed_factors"]


def rocmseat_argv() -> list[str]:
    script = Path(sys.executable).parent / "rocmseat"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from rocmseat.cli.main import main; main()"]


def child_env(tmp_path: Path, sock: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMSEAT_")}
    env["ROCMSEAT_ERROR_LOG"] = str(tmp_path / "error.log")
    if sock is not None:
        env["NOTIFY_SOCKET"] = str(sock)
    return env


def test_never_healthy_engine_times_out_and_leaves_nothing(tmp_path):
    seat = write_seat(tmp_path, [sys.executable, "-c", "import time; time.sleep(600)"],
                      port=free_port(), timeout_s=3)
    proc = subprocess.Popen([*rocmseat_argv(), "launch", str(seat), "--replica", "r0",
                             "--stop-grace", "2"], env=child_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "r0: not ready within 3 s (last probe: /health: " in err
    assert "engine stopped" in err
    report = read_report(tmp_path)
    assert report["outcome"]["timed_out"] is True
    sleepers = [p for p in psutil.process_iter(["cmdline"])
                if "import time; time.sleep(600)" in " ".join(p.info["cmdline"] or [])
                and str(seat) in " ".join(p.info["cmdline"] or [])]
    assert [p for p in sleepers if alive(p.pid)] == []


def test_sigterm_to_launch_stops_the_engine_and_returns_its_status(tmp_path):
    port = free_port()
    pid_file = tmp_path / "engine.pid"
    seat = write_seat(tmp_path, engine("--sigterm-exit", "3", "--grandchild", "--pid-file",
                                       str(pid_file)), port=port)
    sock = tmp_path / "notify.sock"
    grams = Datagrams(str(sock), str(sock))
    proc = subprocess.Popen([*rocmseat_argv(), "launch", str(seat), "--replica", "r0"],
                            env=child_env(tmp_path, sock), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in wait_for_file(pid_file, 60).split()]
        seen: list[str] = []
        end = time.monotonic() + 60
        while time.monotonic() < end and not any(g.startswith("READY=1") for g in seen):
            seen += grams.read_all()
            time.sleep(0.1)
        assert any(g.startswith("READY=1") for g in seen), seen
        second = subprocess.run([*rocmseat_argv(), "launch", str(seat), "--replica", "r0"],
                                env=child_env(tmp_path), capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 1, second.stderr
        assert "replica r0 of seat test-cpu is already being launched by another process" in (
            second.stderr)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    seen += grams.read_all()
    assert proc.returncode == 3, err
    assert "received SIGTERM, forwarded to the engine; it exited with status 3" in err
    assert any(g.startswith("STOPPING=1") for g in seen)
    end = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    assert [p for p in pids if alive(p)] == []  # the engine and the child it left behind
    assert "test engine listening" in out


@pytest.mark.parametrize("client", ["docker", "podman", "nerdctl"])
def test_an_engine_in_a_container_is_refused_in_one_line(rocmseat_cli, tmp_path, client):
    """Issue 26, item 9: `command = ["docker", "run", ...]` passed the dry run; on a node the
    replica's HIP_VISIBLE_DEVICES, cache variables and NUMA binding reach the client, not the
    engine. The dry run and launch refuse it (exit 2), saying what would silently break."""
    binary = tmp_path / "bin" / client  # installed: the refusal is the only problem
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    seat = write_seat(tmp_path, [str(binary), "run", "--rm", "--device=/dev/kfd",
                                 "vllm/vllm-openai-rocm:v0.11.0", "vllm", "serve"],
                      port=free_port())
    line = (f"engine.command starts a container ({client}): the replica's HIP_VISIBLE_DEVICES, "
            f"cache variables and NUMA binding would reach the {client} client, not the engine "
            "(every replica would see every GPU, the compile caches would land inside the "
            "container, outside the cache store); give [engine] runtime = \"podman\" or "
            "\"docker\" and image = \"<name>@sha256:<digest>\", with command the engine's own, "
            "or run the engine on the host (docs/launch.md, \"Containers\")")
    dry = rocmseat_cli("launch", str(seat), "--dry-run")
    assert (dry.exit_code, dry.stderr) == (2, absent_lines([line]))
    result = rocmseat_cli("launch", str(seat), "--replica", "r0")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == f"rocmseat: error: {line}"
    assert not (tmp_path / "cache").exists()  # refused before any side effect


def test_tp4x2_gates_pass_around_the_dead_links_and_tp8_is_refused(rocmseat_cli, monkeypatch,
                                                                    tmp_path):
    """Issue 33 on the degraded hive: each TP4 group's sysfs gate passes (the dead links are
    outside its GPUs: warnings), and TP8 has no group: refused, naming the link (exit 1)."""
    monkeypatch.chdir(REPO)
    hive = str(FIXTURES / "sysfs" / "mi300x-hive-degraded")
    for replica in ("r0", "r1"):
        gate = rocmseat_cli("launch", str(REPO / "launchers" / "mi300x-tp4x2.toml"),
                            "--replica", replica, "--preflight-only", "--sysfs-root", hive,
                            "--state-dir", str(tmp_path / "state"))
        assert gate.exit_code == 0, gate.stderr
        assert "outside this replica's GPUs" in gate.stderr
    refused = rocmseat_cli("launch", str(REPO / "launchers" / "mi300x-tp8.toml"), "--dry-run",
                           "--sysfs-root", hive, "--state-dir", str(tmp_path / "state"))
    assert refused.exit_code == 1
    assert "the xGMI link 0000:22:00.0 -> 0000:38:00.0 is inactive" in refused.stderr
