"""The engine in a container (issue 35, item 1): `[engine] runtime` and `image`, the runtime's
command built from the placement, wrappers looked through, and the real Podman's parser.

The flagship seat (launchers/r9700-mxfp4-dflash.toml) with `runtime = "podman"` is placed on
the x99-r9700 fixture tree, whose KFD topology carries each GPU's drm_render_minor (as
kfd_topology.c node_show prints it) beside class/drm/renderD*/device.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rocmseat.errors import ConfigError
from rocmseat.launch.container import (
    container_argv,
    container_refusal,
    look_through,
    quadlet_container,
    quadlet_supported,
    render_nodes,
)
from rocmseat.launch.flow import dry_run
from rocmseat.seat.load import load_seat
from tests.cache.builders import rocm_seat
from tests.cache.test_key import ENGINE, key_of, models
from tests.conftest import REPO
from tests.sysfs.conftest import SYSFS_FIXTURES

X99 = SYSFS_FIXTURES / "x99-r9700"
FLAGSHIP = REPO / "launchers" / "r9700-mxfp4-dflash.toml"
DIGEST = "sha256:" + "4d" * 32


def flagship(tmp_path: Path, runtime: str = "podman", image: str | None = None,
             command: str | None = None) -> Path:
    """The flagship seat as a container seat, its model, drafter and caches under tmp_path."""
    text = FLAGSHIP.read_text()
    image = image or f"docker.io/rocm/vllm@{DIGEST}"
    lines = f'host = "127.0.0.1"\nruntime = "{runtime}"\nimage = "{image}"\n'
    text = text.replace('host = "127.0.0.1"\n', lines, 1)
    if command is not None:
        text = text.replace('command = ["/opt/vllm/bin/vllm", "serve"]', f"command = {command}")
    for old, new in (("/models/", f"{tmp_path}/models/"),
                     ("/var/cache/rocmseat/", f"{tmp_path}/cache/"),
                     ('"../checks/', f'"{REPO}/checks/')):
        text = text.replace(old, new)
    for name in ("qwen3.8-27b-mxfp4", "qwen3.8-27b-dflash-fp8"):
        (tmp_path / "models" / name).mkdir(parents=True, exist_ok=True)
    path = tmp_path / "seat.toml"
    path.write_text(text)
    return path


def plans(tmp_path: Path, **kw: str):
    seat = load_seat(flagship(tmp_path, **kw))
    return seat, {p.replica: p for p in dry_run(seat, X99, state_dir=tmp_path / "state")}


# ----- wrappers -------------------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "container", "program0"), [
    (["sudo", "docker", "run", "img"], "docker", "docker"),
    (["/usr/bin/env", "docker", "run", "img"], "docker", "docker"),
    (["env", "-i", "A=1", "B=2", "podman", "run"], "podman", "podman"),
    (["env", "-S", "nerdctl run img"], "nerdctl", "nerdctl"),
    (["sudo", "-u", "svc", "-E", "env", "X=1", "nice", "-n", "5", "docker"], "docker", "docker"),
    (["nice", "-10", "ionice", "-c", "2", "-n", "0", "/usr/bin/podman", "run"], "podman",
     "/usr/bin/podman"),
    (["numactl", "--cpunodebind=0", "--membind=0", "docker", "run"], "docker", "docker"),
    (["numactl", "-N", "0", "-m", "0", "docker", "run"], "docker", "docker"),
    (["taskset", "-c", "0-3", "docker", "run"], "docker", "docker"),
    (["taskset", "0xff", "podman", "run"], "podman", "podman"),
    (["systemd-run", "--scope", "-p", "CPUQuota=50%", "--unit=x", "docker", "run"], "docker",
     "docker"),
    (["apptainer", "exec", "--bind", "/a:/a", "vllm.sif", "vllm", "serve"], "apptainer exec",
     "apptainer"),
    (["sudo", "singularity", "exec", "img.sif", "python"], "singularity exec", "singularity"),
    (["sudo", "/opt/vllm/bin/vllm", "serve"], None, "/opt/vllm/bin/vllm"),
    (["nice", "-n", "5", "taskset", "-c", "0-13", "vllm", "serve"], None, "vllm"),
    (["/opt/vllm/bin/vllm", "serve"], None, "/opt/vllm/bin/vllm"),
])
def test_wrappers_are_looked_through(argv, container, program0):
    looked = look_through(argv)
    assert looked.container == container
    assert looked.program[0] == program0
    assert (container_refusal(argv) is None) == (container is None)


def test_a_wrapper_that_starts_nothing():
    assert look_through(["env", "-i"]).program == ()
    assert look_through(["sudo", "--"]).program == ()


@pytest.mark.parametrize("command", ['["sudo", "docker", "run", "rocm/vllm"]',
                                     '["/usr/bin/env", "docker", "run", "rocm/vllm"]',
                                     '["apptainer", "exec", "vllm.sif", "vllm", "serve"]'])
def test_wrapped_container_commands_are_refused_by_the_dry_run(rocmseat_cli, tmp_path,
                                                               command):
    seat = flagship(tmp_path, runtime="host").read_text()
    seat = seat.replace('runtime = "host"\n', "")
    seat = seat.replace(f'image = "docker.io/rocm/vllm@{DIGEST}"\n', "")
    seat = seat.replace('command = ["/opt/vllm/bin/vllm", "serve"]', f"command = {command}")
    (tmp_path / "wrapped.toml").write_text(seat)
    result = rocmseat_cli("launch", str(tmp_path / "wrapped.toml"), "--dry-run",
                          "--sysfs-root", str(X99), "--state-dir", str(tmp_path / "state"))
    assert result.exit_code == 2
    said = [line for line in result.stderr.splitlines() if "starts a container" in line]
    assert said and "give [engine] runtime" in said[0], result.stderr


# ----- the image ------------------------------------------------------------------------------
@pytest.mark.parametrize(("image", "why"), [
    ("docker.io/rocm/vllm:latest", "a tag is refused"),
    ("rocm/vllm", "a tag is refused"),
    ("rocm/vllm@sha256:abc", "is not '<name>@sha256:<64 hex>'"),
    ("Rocm/vllm@" + DIGEST, "is not '<name>@sha256:<64 hex>'"),
])
def test_a_tag_or_a_bad_digest_is_refused(rocmseat_cli, tmp_path, image, why):
    path = flagship(tmp_path, image=image)
    result = rocmseat_cli("launch", str(path), "--dry-run", "--sysfs-root", str(X99),
                          "--state-dir", str(tmp_path / "state"))
    assert result.exit_code == 2
    assert "key 'engine.image'" in result.stderr and why in result.stderr


def test_runtime_and_image_go_together(tmp_path):
    path = flagship(tmp_path)
    text = path.read_text()
    path.write_text(text.replace(f'image = "docker.io/rocm/vllm@{DIGEST}"\n', ""))
    with pytest.raises(ConfigError, match="needs an image"):
        load_seat(path)
    path.write_text(text.replace('runtime = "podman"\n', ""))
    with pytest.raises(ConfigError, match="an image needs runtime"):
        load_seat(path)


def test_a_digest_change_changes_the_key(tmp_path):
    models(tmp_path)
    seats = [rocm_seat(tmp_path, ('image_digest = "sha256:' + "a" * 64 + '"',
                                  f'runtime = "podman"\nimage = "rocm/vllm@sha256:{d * 64}"'),
                       name=f"s{d}.toml") for d in "ab"]
    a, b = (key_of(s, engine=ENGINE) for s in seats)
    assert a.factors["image_digest"] == "sha256:" + "a" * 64
    assert a.digest != b.digest


# ----- the runtime's command ------------------------------------------------------------------
def test_render_nodes_from_kfd_cross_checked_with_drm():
    assert render_nodes(X99, ("0000:05:00.0", "0000:09:00.0")) == (
        "/dev/dri/renderD129", "/dev/dri/renderD130")


def test_a_render_node_of_another_gpu_is_refused(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(X99, tree, symlinks=True)
    link = tree / "class" / "drm" / "renderD130"
    target = os.readlink(link)
    link.unlink()
    link.symlink_to(os.readlink(tree / "class" / "drm" / "renderD131"))
    assert target != os.readlink(link)
    with pytest.raises(ConfigError, match=r"renderD130/device is 0000:86:00.0"):
        render_nodes(tree, ("0000:05:00.0", "0000:09:00.0"))


def test_a_gpu_without_a_render_minor_is_refused(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(X99, tree, symlinks=True)
    props = tree / "class" / "kfd" / "kfd" / "topology" / "nodes" / "3" / "properties"
    props.write_text("\n".join(line for line in props.read_text().splitlines()
                               if not line.startswith("drm_render_minor")) + "\n")
    with pytest.raises(ConfigError, match=r"0000:09:00\.0: KFD gives it no drm_render_minor"):
        render_nodes(tree, ("0000:05:00.0", "0000:09:00.0"))


def test_the_flagship_as_podman_replicas(tmp_path):
    _seat, by_name = plans(tmp_path)
    r0, r1 = by_name["r0"], by_name["r1"]
    for plan, renders, cpus, node in ((r0, (129, 130), "0-13,28-41", 0),
                                      (r1, (131, 132), "14-27,42-55", 1)):
        argv = plan.argv
        assert argv[:3] == ("podman", "run", "--rm")
        devices = [a for a in argv if a.startswith("--device=")]
        assert devices == ["--device=/dev/kfd",
                           *(f"--device=/dev/dri/renderD{m}" for m in renders)]
        assert "--device=/dev/dri" not in argv
        assert plan.env["HIP_VISIBLE_DEVICES"] == "0,1"  # the container's own numbering
        assert "--env=HIP_VISIBLE_DEVICES" in argv and not any("=0,1" in a for a in argv)
        assert f"--volume={plan.cache_dir}:{plan.cache_dir}" in argv
        model = f"{tmp_path}/models/qwen3.8-27b-mxfp4"
        assert f"--volume={model}:{model}:ro" in argv
        assert f"--cpuset-cpus={cpus}" in argv and f"--cpuset-mems={node}" in argv
        assert "--security-opt=seccomp=unconfined" in argv and "--network=host" in argv
        image = argv.index(f"docker.io/rocm/vllm@{DIGEST}")
        assert argv[image - 1] == "--entrypoint=/opt/vllm/bin/vllm" and argv[image + 1] == "serve"
        assert not any("numactl" in a for a in argv)
        # the cache variables point into the mounted dir
        assert plan.env["VLLM_CACHE_ROOT"].startswith(str(plan.cache_dir))


def test_docker_runtime_has_no_podman_only_flags(tmp_path):
    _, by_name = plans(tmp_path, runtime="docker")
    assert by_name["r0"].argv[:2] == ("docker", "run") and "--replace" not in by_name["r0"].argv


def test_quadlet_file_per_replica(tmp_path, golden):
    seat, by_name = plans(tmp_path)
    plan = by_name["r0"]
    text = quadlet_container(seat, plan, render_nodes(X99, plan.pci_pair))
    lines = text.splitlines()
    assert [x for x in lines if x.startswith("AddDevice=")] == [
        "AddDevice=/dev/kfd", "AddDevice=/dev/dri/renderD129", "AddDevice=/dev/dri/renderD130"]
    assert "Environment=HIP_VISIBLE_DEVICES=0,1" in lines
    assert f"Image=docker.io/rocm/vllm@{DIGEST}" in lines
    assert any(x.startswith("PodmanArgs=") and "--cpuset-mems=0" in x for x in lines)
    golden("quadlet-r9700-r0.container", text.replace(str(tmp_path), "<tmp>"))


@pytest.mark.parametrize(("text", "ok"), [("podman version 4.3.1", False),
                                          ("podman version 4.4.0", True),
                                          ("podman version 5.2.2", True), ("", False),
                                          ("podman version x.y", False)])
def test_quadlet_needs_podman_4_4(text, ok):
    assert quadlet_supported(text) is ok


# ----- the real Podman's parser ---------------------------------------------------------------
def _podman() -> str:
    podman = shutil.which("podman")
    if podman is None:
        pytest.skip("podman not installed (Debian package podman)")
    return podman


@pytest.fixture
def local_image(tmp_path):
    """A one-file image imported into Podman's local store (no registry is reachable here)."""
    podman = _podman()
    root = tmp_path / "rootfs" / "bin"
    root.mkdir(parents=True)
    shutil.copy("/bin/true", root / "true")
    tar = tmp_path / "rootfs.tar"
    subprocess.run(["tar", "-C", str(tmp_path / "rootfs"), "-cf", str(tar), "."], check=True)
    name = f"localhost/rocmseat-test-{os.getpid()}"
    done = subprocess.run([podman, "import", str(tar), f"{name}:scratch"], capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        pytest.skip(f"podman cannot import an image here: {done.stderr.strip()[:200]}")
    digest = subprocess.run([podman, "image", "inspect", "--format", "{{.Digest}}",
                             f"{name}:scratch"], capture_output=True, text=True,
                            check=True).stdout.strip()
    yield f"{name}@{digest}"
    subprocess.run([podman, "rmi", "-f", f"{name}:scratch"], capture_output=True, timeout=120)


@pytest.mark.tools
def test_podman_create_and_init_take_the_argv(tmp_path, local_image):
    podman = _podman()
    seat = load_seat(flagship(tmp_path, image=local_image))
    # podman checks the cpuset against this host's CPUs: the fixture's node 0 gets this host's
    tree = tmp_path / "tree"
    shutil.copytree(X99, tree, symlinks=True)
    cpus = sorted(os.sched_getaffinity(0))
    here = f"{cpus[0]}-{cpus[-1]}" if len(cpus) > 1 else str(cpus[0])
    (tree / "devices" / "system" / "node" / "node0" / "cpulist").write_text(here + "\n")
    plan = next(p for p in dry_run(seat, tree, state_dir=tmp_path / "state")
                if p.replica == "r0")
    # device nodes with the real majors and minors under a scratch /dev (none exist here)
    dev = tmp_path / "dev"
    (dev / "dri").mkdir(parents=True)
    try:
        os.mknod(dev / "kfd", 0o660 | 0o020000, os.makedev(235, 0))
        for minor in (129, 130):
            os.mknod(dev / "dri" / f"renderD{minor}", 0o660 | 0o020000, os.makedev(226, minor))
    except PermissionError:
        pytest.skip("mknod needs root")
    plan.cache_dir.mkdir(parents=True, exist_ok=True)
    devices = render_nodes(tree, plan.pci_pair)
    argv = list(container_argv(seat, plan, devices, gids=(44,), dev_root=dev))
    argv[1] = "create"  # the same flags; a container cannot run on these machines
    env = {**os.environ, **plan.env}
    name = argv[argv.index("--rm") + 1].split("=", 1)[1]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        inspect = json.loads(subprocess.run([podman, "inspect", name], capture_output=True,
                                            text=True, check=True).stdout)[0]
        host = inspect["HostConfig"]
        assert (host["CpusetCpus"], host["CpusetMems"]) == (here, "0")
        assert "HIP_VISIBLE_DEVICES=0,1" in inspect["Config"]["Env"]
        assert f"{plan.cache_dir}:{plan.cache_dir}:rw,rprivate,rbind" in host["Binds"] or any(
            b.startswith(f"{plan.cache_dir}:{plan.cache_dir}") for b in host["Binds"])
        # `podman init` writes the OCI spec the runtime would run (crun then refuses here)
        subprocess.run([podman, "init", name], capture_output=True, text=True, timeout=120)
        config = next(Path("/var/lib/containers/storage").glob(
            f"*-containers/{inspect['Id']}/userdata/config.json"), None)
        if config is None:
            pytest.skip("podman init wrote no OCI config here")
        spec = json.loads(config.read_text())
        assert [(d["path"], d["major"], d["minor"]) for d in spec["linux"]["devices"]] == [
            ("/dev/kfd", 235, 0), ("/dev/dri/renderD129", 226, 129),
            ("/dev/dri/renderD130", 226, 130)]
        assert spec["linux"]["resources"]["cpu"] == {"cpus": here, "mems": "0"}
        assert "HIP_VISIBLE_DEVICES=0,1" in spec["process"]["env"]
        assert spec["process"]["args"][:2] == ["/opt/vllm/bin/vllm", "serve"]
        assert 44 in spec["process"]["user"].get("additionalGids", [])
    finally:
        subprocess.run([podman, "rm", "-f", name], capture_output=True, timeout=120)


@pytest.mark.tools
def test_podman_refuses_a_tag_the_seat_would_have_refused_too(tmp_path, local_image):
    # the digest reference is what podman resolves: a wrong digest is not found locally
    podman = _podman()
    name, _ = local_image.split("@")
    wrong = f"{name}@sha256:{'0' * 64}"
    done = subprocess.run([podman, "create", "--pull=never", wrong], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0


def test_units_of_a_podman_seat_let_the_runtime_write_its_state(rocmseat_cli, tmp_path):
    seat = flagship(tmp_path)
    out = tmp_path / "units"
    result = rocmseat_cli("systemd", "render", str(seat), "--sysfs-root", str(X99),
                          "--state-dir", str(tmp_path / "state"), "--out", str(out),
                          "--rocmseat-bin", "/usr/local/bin/rocmseat")
    assert result.exit_code == 0, result.stderr
    unit = (out / "rocmseat-r9700-mxfp4-dflash-r0.service").read_text().splitlines()
    rw = next(x for x in unit if x.startswith("ReadWritePaths="))
    assert "/var/lib/containers" in rw and "/run/containers" in rw
    assert "ProtectControlGroups=no" in unit
    host = (REPO / "tests" / "golden" / "units" / "rocmseat-r9700-mxfp4-dflash-r0.service")
    assert "ProtectControlGroups=yes" in host.read_text()  # a host seat keeps it


@pytest.mark.parametrize("version", ["podman version 4.3.1", "podman version 4.9.3"])
def test_render_writes_quadlet_files_where_podman_has_quadlet(rocmseat_cli, tmp_path,
                                                              monkeypatch, version):
    # a `podman` that says its version, first on PATH: 4.3.1 is Debian 12's (no Quadlet)
    fake = tmp_path / "bin" / "podman"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho '{version}'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    seat = flagship(tmp_path)
    out = tmp_path / "units"
    result = rocmseat_cli("systemd", "render", str(seat), "--sysfs-root", str(X99),
                          "--state-dir", str(tmp_path / "state"), "--out", str(out),
                          "--rocmseat-bin", "/usr/local/bin/rocmseat")
    assert result.exit_code == 0, result.stderr
    quadlets = sorted(p.name for p in out.glob("*.container"))
    if version.endswith("4.3.1"):
        assert quadlets == []
        assert "podman version 4.3.1: no Quadlet (Podman 4.4+); the replica units run " \
               "`podman run` in the foreground" in result.stderr
    else:
        assert quadlets == ["rocmseat-r9700-mxfp4-dflash-r0-engine.container",
                            "rocmseat-r9700-mxfp4-dflash-r1-engine.container"]
        r1 = (out / quadlets[1]).read_text().splitlines()
        assert [x for x in r1 if x.startswith("AddDevice=")] == [
            "AddDevice=/dev/kfd", "AddDevice=/dev/dri/renderD131",
            "AddDevice=/dev/dri/renderD132"]
    # the replica units are there either way, and they run launch (podman run in the foreground)
    assert (out / "rocmseat-r9700-mxfp4-dflash-r0.service").exists()
