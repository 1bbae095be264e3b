"""`rocmseat cache-audit`: a seat's caches end to end (real key, real store, real CLI)."""

# ruff: noqa: E501  (expected lines are quoted whole)

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from rocmseat.cache.key import replica_key
from rocmseat.cache.store import prepare
from rocmseat.seat.load import load_seat
from tests.cache.builders import write_model
from tests.cli.test_key import SEAT, fake_python
from tests.conftest import CliResult

Cli = Callable[..., CliResult]



@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every seat's placement names its state dir (rocmseat.state.state_root): these seats set
    # none, so the environment variable gives it, as --state-dir would
    monkeypatch.setenv("ROCMSEAT_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def seat_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr("rocmseat.cli.cache_audit.scan_processes", lambda: iter(()))
    write_model(tmp_path / "models" / "target")
    write_model(tmp_path / "models" / "drafter", hidden=32, layers=1, shards=1)
    fake_python(tmp_path / "engine-python")
    path = tmp_path / "seat.toml"
    path.write_text(SEAT)
    return path


def launch_prepare(seat_file: Path) -> str:
    """What `launch` does before starting a replica: key it, prepare its cache."""
    seat = load_seat(seat_file)
    result = prepare(seat.cache_root / "r0", replica_key(seat, "r0", None), seat_name=seat.name)
    return result.message


def test_lifecycle(rocmseat_cli: Cli, seat_file: Path, tmp_path: Path) -> None:
    empty = rocmseat_cli("cache-audit", str(seat_file))
    assert empty.exit_code == 0 and "does not exist yet" in empty.stdout
    launch_prepare(seat_file)
    (tmp_path / "cache" / "r0" / "vllm" / "graph.bin").write_bytes(b"x" * 5000)
    ok = rocmseat_cli("cache-audit", str(seat_file))
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert "live, current: manifest key = current key" in ok.stdout
    # The operator shortens the draft: the live cache is now stale, and the audit says why.
    seat_file.write_text(SEAT.replace("num_speculative_tokens = 3", "num_speculative_tokens = 2"))
    stale = rocmseat_cli("cache-audit", str(seat_file), "--json")
    assert stale.exit_code == 1
    doc = json.loads(stale.stdout)
    assert doc["schema"] == "rocmseat.cache-audit/v1"
    [replica] = doc["seats"][0]["replicas"]
    assert replica["cache"]["state"] == "stale"
    assert [c["text"] for c in replica["cache"]["changes"]] == ["speculative.num_speculative_tokens: 3 -> 2"]
    message = launch_prepare(seat_file)
    assert "because changed: speculative.num_speculative_tokens: 3 -> 2" in message
    after = rocmseat_cli("cache-audit", str(seat_file))
    assert after.exit_code == 0
    assert "live, current: manifest key = current key" in after.stdout
    assert "moved because changed: speculative.num_speculative_tokens: 3 -> 2" in after.stdout
    assert "differs from current" not in after.stdout  # the same diff is said once
    doc = json.loads(rocmseat_cli("cache-audit", str(seat_file), "--json").stdout)
    [moved] = doc["seats"][0]["replicas"][0]["moved_aside"]
    assert moved["file_count"] == 2 and moved["size_bytes"] > 5000
    assert moved["moved_because"] == "changed: speculative.num_speculative_tokens: 3 -> 2"
    # Back to 3 drafts without a launch: the live cache is stale, the moved one matches now.
    seat_file.write_text(SEAT)
    back = rocmseat_cli("cache-audit", str(seat_file))
    assert back.exit_code == 1 and "live, stale" in back.stdout
    assert "moved because changed: speculative.num_speculative_tokens: 3 -> 2" in back.stdout


def test_prune(rocmseat_cli: Cli, seat_file: Path, tmp_path: Path) -> None:
    launch_prepare(seat_file)
    seat_file.write_text(SEAT.replace('RADIANCE_X = "1"', 'RADIANCE_X = "0"'))
    launch_prepare(seat_file)
    [aside] = [p for p in (tmp_path / "cache").iterdir() if ".stale-" in p.name]
    young = rocmseat_cli("cache-audit", str(seat_file), "--prune", "--older-than", "14d", "--yes")
    assert young.exit_code == 0 and aside.exists()
    assert "keep" in young.stdout and "younger than 14d" in young.stdout
    plan = rocmseat_cli("cache-audit", str(seat_file), "--prune", "--older-than", "0s")
    assert plan.exit_code == 0 and aside.exists()
    assert f"remove {aside}" in plan.stdout and "run again with --yes" in plan.stdout
    act = rocmseat_cli("cache-audit", str(seat_file), "--prune", "--older-than", "0s", "--yes", "--json")
    assert act.exit_code == 0 and not aside.exists()
    doc = json.loads(act.stdout)
    assert doc["prune"]["acted"] is True and doc["prune"]["plan"][0]["remove"] is True
    assert (tmp_path / "cache" / "r0").is_dir()


def test_prune_in_use_is_kept(rocmseat_cli: Cli, seat_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rocmseat.cache.usage import ProcessView

    launch_prepare(seat_file)
    seat_file.write_text(SEAT.replace('RADIANCE_X = "1"', 'RADIANCE_X = "0"'))
    launch_prepare(seat_file)
    [aside] = [p for p in (tmp_path / "cache").iterdir() if ".stale-" in p.name]
    views = [ProcessView(31337, "old-replica", {"VLLM_CACHE_ROOT": str(aside / "vllm")}, ())]
    monkeypatch.setattr("rocmseat.cli.cache_audit.scan_processes", lambda: iter(views))
    result = rocmseat_cli("cache-audit", str(seat_file), "--prune", "--older-than", "0s", "--yes")
    assert aside.exists() and "in use: yes (pid 31337)" in result.stdout


def test_engine_unknown_exit_2(rocmseat_cli: Cli, seat_file: Path, tmp_path: Path) -> None:
    launch_prepare(seat_file)
    fake_python(tmp_path / "engine-python", None)
    result = rocmseat_cli("cache-audit", str(seat_file))
    assert result.exit_code == 2
    assert "current key unknown: these factors could not be computed:\n      engine: engine python" in result.stdout


@pytest.mark.parametrize("args", [["--yes"], ["--older-than", "1d"], ["--prune"]])
def test_usage_errors(rocmseat_cli: Cli, seat_file: Path, args: list[str]) -> None:
    result = rocmseat_cli("cache-audit", str(seat_file), *args)
    assert result.exit_code == 2 and ("--prune" in result.stderr)


def test_unkeyed_dir(rocmseat_cli: Cli, seat_file: Path, tmp_path: Path) -> None:
    (tmp_path / "cache" / "r0" / "triton").mkdir(parents=True)
    (tmp_path / "cache" / "r0" / "triton" / "k.hsaco").write_bytes(b"k")
    result = rocmseat_cli("cache-audit", str(seat_file))
    assert result.exit_code == 1 and "unkeyed: no manifest" in result.stdout


def test_auto_seat_on_a_host_without_its_gpus(rocmseat_cli: Cli, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 10: an auto seat's replicas come from the node's GPUs. Where /sys shows none (a
    monitoring host), cache-audit reads the placement launch recorded, and with neither it
    says why instead of guessing a replica list from the dirs in the cache root."""
    from rocmseat.placement.place import place
    from rocmseat.placement.recorded import write_recorded
    from tests.cache.builders import DIGEST_A, ROCM_SEAT
    from tests.conftest import FIXTURES

    monkeypatch.setattr("rocmseat.cli.cache_audit.scan_processes", lambda: iter(()))
    write_model(tmp_path / "models" / "target")
    write_model(tmp_path / "models" / "drafter", hidden=32, layers=1, shards=1)
    seat_file = tmp_path / "seat.toml"
    seat_file.write_text(ROCM_SEAT.replace("{digest}", DIGEST_A))
    (tmp_path / "cache" / "r1").mkdir(parents=True)
    state = tmp_path / "state"
    args = ("cache-audit", str(seat_file), "--json", "--sysfs-root",
            str(FIXTURES / "sysfs" / "no-amdgpu"), "--state-dir", str(state))
    blind = rocmseat_cli(*args)
    assert blind.exit_code == 1, blind.stderr  # an unkeyed dir: the next launch moves it aside
    [replica] = json.loads(blind.stdout)["seats"][0]["replicas"]
    assert replica["replica"] == "r1"
    why = replica["cache"]["unknown_factors"][0]
    assert why.startswith("seat t places its replicas from the node's GPUs ([replicas] mode = "
                          "'auto') and this host cannot tell them: no AMD GPU under ")
    assert why.endswith(f"no replica has a placement.json under {state / 'seats' / 't'} (none "
                        "was launched with this state dir)")
    table = rocmseat_cli(*[a for a in args if a != "--json"])
    assert "no current key: seat t places its replicas from the node's GPUs" in table.stdout
    # launch on the GPU node recorded r1's placement in the state dir: now it is known here
    seat = load_seat(seat_file)
    on_node = place(seat, sysfs_root=FIXTURES / "sysfs" / "x99-r9700", state_root=state)
    write_recorded(on_node.records[1])
    known = rocmseat_cli(*args)
    [replica] = json.loads(known.stdout)["seats"][0]["replicas"]
    assert replica["replica"] == "r1" and not any("places its replicas" in u
                                                  for u in replica["cache"]["unknown_factors"])
    assert "gpu_arch" not in replica["unknown_factors"]  # the recorded pair's gfx1201
    table = rocmseat_cli(*[a for a in args if a != "--json"])
    assert "no current key" not in table.stdout


SECRETS = ("hf_FLAGSECRET111", "sk-ENVSECRET222", "hf_NEUTRALSECRET333", "pw-INLINE444")
SECRET_SEAT = SEAT.replace(
    'dtype = "bfloat16"',
    'dtype = "bfloat16"\nextra_args = ["--hf-token", "hf_FLAGSECRET111", '
    '"--db-password=pw-INLINE444", "--enable-prefix-caching"]',
).replace('RADIANCE_X = "1"', 'RADIANCE_X = "1"\nRADIANCE_API_KEY = "sk-ENVSECRET222"\n'
          'HF_TOKEN = "hf_NEUTRALSECRET333"')


def no_secret(*texts: str) -> None:
    for text in texts:
        for secret in (*SECRETS, "2ND-ROTATED"):
            assert secret not in text, (secret, text)


def test_secrets_never_leave_through_the_config_key(rocmseat_cli: Cli, seat_file: Path,
                                                     tmp_path: Path) -> None:
    """Review of issue 10, defect 4: `key --explain`, `key --json`, the cache manifest (0644),
    the "moved cache aside because changed: ..." line (stderr, startup.json, the next
    manifest's replaced.why) and cache-audit showed the values of secret flags in engine_args
    and of secret-named variables. The key holds a digest of each secret: a changed secret
    still changes the key, its value is never stored or printed."""
    seat_file.write_text(SECRET_SEAT)
    explain = rocmseat_cli("key", str(seat_file), "--explain")
    as_json = rocmseat_cli("key", str(seat_file), "--json")
    assert explain.exit_code == 0 and as_json.exit_code == 0, explain.stderr
    no_secret(explain.stdout, as_json.stdout)
    factors = json.loads(as_json.stdout)["factors"]
    assert factors["engine_args"][0] == "--hf-token"
    assert factors["engine_args"][1].startswith("secret-sha256:")
    assert factors["engine_args"][2].startswith("--db-password=secret-sha256:")
    assert factors["env"]["RADIANCE_API_KEY"].startswith("secret-sha256:")
    assert "HF_TOKEN=<redacted>  neutral" in explain.stdout
    first_key = json.loads(as_json.stdout)["key"]
    launch_prepare(seat_file)
    manifest = (tmp_path / "cache" / "r0" / "rocmseat-manifest.json").read_text()
    no_secret(manifest)
    # the secrets rotate: the key changes, the move-aside says which factors, not the values
    seat_file.write_text(SECRET_SEAT.replace("hf_FLAGSECRET111", "hf_2ND-ROTATED")
                         .replace("sk-ENVSECRET222", "sk-2ND-ROTATED"))
    rotated = json.loads(rocmseat_cli("key", str(seat_file), "--json").stdout)["key"]
    assert rotated != first_key
    audit = rocmseat_cli("cache-audit", str(seat_file), "--json")
    table = rocmseat_cli("cache-audit", str(seat_file))
    assert audit.exit_code == 1
    no_secret(audit.stdout, table.stdout)
    message = launch_prepare(seat_file)
    no_secret(message)
    assert "env.RADIANCE_API_KEY: secret-sha256:" in message and "engine_args: " in message
    no_secret(*(p.read_text() for p in (tmp_path / "cache").rglob("*.json")))
    after = rocmseat_cli("cache-audit", str(seat_file), "--json")
    no_secret(after.stdout, rocmseat_cli("cache-audit", str(seat_file)).stdout)


def test_a_manifest_of_an_older_rocmseat_with_raw_secrets_is_shown_without_them(
        rocmseat_cli: Cli, seat_file: Path, tmp_path: Path) -> None:
    """Manifests written before the secrets were sealed hold them raw (factors and the
    replaced.why text): the audit and the next move-aside compare sealed values, and say
    neither the old nor the new value."""
    seat_file.write_text(SECRET_SEAT)
    launch_prepare(seat_file)
    seat_file.write_text(SECRET_SEAT.replace("num_speculative_tokens = 3",
                                             "num_speculative_tokens = 2"))
    launch_prepare(seat_file)
    live = tmp_path / "cache" / "r0" / "rocmseat-manifest.json"
    doc = json.loads(live.read_text())
    doc["factors"]["env"]["RADIANCE_API_KEY"] = "sk-ENVSECRET222"
    doc["factors"]["engine_args"] = ["--hf-token", "hf_FLAGSECRET111",
                                     "--db-password=pw-INLINE444", "--enable-prefix-caching"]
    doc["replaced"]["why"] = ("changed: engine_args: [\"--hf-token\",\"hf_OLD\"] -> "
                              "[\"--hf-token\",\"hf_FLAGSECRET111\"]; env.RADIANCE_API_KEY: "
                              "sk-OLD -> sk-ENVSECRET222; speculative.num_speculative_tokens: "
                              "3 -> 2")
    live.write_text(json.dumps(doc))
    for args in ((), ("--json",)):
        result = rocmseat_cli("cache-audit", str(seat_file), *args)
        no_secret(result.stdout)
        assert "sk-OLD" not in result.stdout and "hf_OLD" not in result.stdout
        assert "speculative.num_speculative_tokens: 3 -> 2" in result.stdout
    seat_file.write_text(SECRET_SEAT)
    message = launch_prepare(seat_file)
    assert "moved cache aside" in message and "num_speculative_tokens: 2 -> 3" in message
    no_secret(message, *(p.read_text() for p in (tmp_path / "cache").rglob("*.json")
                         if "stale" not in str(p)))


def test_flagship_on_a_host_without_gpus_says_why_the_table_is_empty(rocmseat_cli, tmp_path):
    # issue 35, item 7: an empty table with no reason
    from tests.conftest import REPO
    from tests.sysfs.conftest import SYSFS_FIXTURES

    result = rocmseat_cli("cache-audit", str(REPO / "launchers" / "r9700-mxfp4-dflash.toml"),
                          "--sysfs-root", str(SYSFS_FIXTURES / "no-amdgpu"),
                          "--state-dir", str(tmp_path / "fresh"))
    lines = result.stdout.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("REPLICA")))
    assert [line for line in lines[header + 1:] if line.strip()] == []  # no row at all
    why = [line for line in lines[:header] if "no replica of the seat is known" in line]
    assert len(why) == 1 and "no AMD GPU under" in why[0] and "placement.json" in why[0]
    doc = json.loads(rocmseat_cli(
        "cache-audit", str(REPO / "launchers" / "r9700-mxfp4-dflash.toml"), "--json",
        "--sysfs-root", str(SYSFS_FIXTURES / "no-amdgpu"),
        "--state-dir", str(tmp_path / "fresh")).stdout)
    assert any("no replica of the seat is known" in p for p in doc["seats"][0]["problems"])
