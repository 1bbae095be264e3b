"""The engine in a container (`[engine] runtime = "podman" | "docker"`, docs/launch.md
"Containers"), and engine commands that start one behind a wrapper.

What launch decides for a replica reaches a containerized engine only as the runtime's own
flags, so the plan becomes the runtime's command (container_argv), built from the placement:

- `/dev/kfd` and exactly the replica's render nodes, never `/dev/dri` whole. ROCm's
  "Running ROCm Docker containers" (rocm.docs.amd.com, install-on-linux how-to/docker.html)
  gives `--device /dev/kfd --device /dev/dri` and, to restrict a container to some GPUs, their
  `/dev/dri/renderD<N>` nodes only; AMD's device plugin does the same per allocated GPU
  (ROCm/k8s-device-plugin internal/pkg/plugin/plugin.go, Allocate). The minor is KFD's
  `drm_render_minor` of the GPU's topology node (kfd_topology.c node_show), cross-checked
  against `class/drm/renderD<minor>/device`, which must be that GPU;
- the same page's `--security-opt seccomp=unconfined` (memory mapping), and the device nodes'
  own groups (`--group-add <gid>` of /dev/kfd and each render node: `video` on older hosts,
  `render` on newer ones, ROCm/ROCm-docker#116), by number since the image has no such names;
- `HIP_VISIBLE_DEVICES` in the container's own numbering, 0..tp-1 (only the pair is visible
  there); every variable by name (`--env NAME`: the runtime copies the value from its own
  environment, so no value is in the argv, the journal or `ps`);
- the replica's cache dir bind-mounted at the same path (a move-aside on the host is what the
  engine sees), the model and drafter read-only at theirs;
- the NUMA binding as `--cpuset-cpus` / `--cpuset-mems` (numactl is not in vLLM's images,
  vllm#55416); `--network=host` (the port and the readiness probe stay the host's) and
  `--ipc=host` (the TP workers' shared memory, as vLLM's docker docs run it);
- `--entrypoint` the seat's engine command, so the command inside is the seat's, whatever the
  image's ENTRYPOINT; `--rm` and a name per replica.

`podman run` / `docker run` stay in the foreground: the engine's output comes through the
client's stdout and stderr, and the client forwards SIGTERM to the container (`--sig-proxy`,
on by default), so rocmseat's supervisor reads the startup log and stops the engine as on the
host. Pure functions, except render_nodes and device_groups (they read a root).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from rocmseat.engines.command import (
    CONTAINER_CLIENTS,
    CONTAINER_EXECS,
    LookedThrough,
    look_through,
)
from rocmseat.errors import ConfigError
from rocmseat.launch.plan import ReplicaPlan
from rocmseat.seat.model import Seat
from rocmseat.sysfs.drm import render_node_device
from rocmseat.sysfs.kfd import read_kfd_topology

# The wrapper rule lives with the engine seam (rocmseat.engines.command), which checks a seat's
# command against its `[engine] kind` with it; re-exported here for launch's callers.
__all__ = ["CONTAINER_CLIENTS", "CONTAINER_EXECS", "LookedThrough", "container_argv",
           "container_env", "container_refusal", "containerized", "device_groups",
           "look_through", "mounts", "quadlet_container", "quadlet_supported", "render_nodes"]


def container_refusal(argv: Sequence[str]) -> str | None:
    """Why an engine command that starts a container, itself or behind wrappers, is refused
    (one line), else None: what launch sets for the engine would reach the client instead."""
    looked = look_through(argv)
    if looked.container is None:
        return None
    via = f", through {' '.join(looked.wrappers)}" if looked.wrappers else ""
    return (f"engine.command starts a container ({looked.container}{via}): the replica's "
            "HIP_VISIBLE_DEVICES, cache variables and NUMA binding would reach the "
            f"{looked.container.split()[0]} client, not the engine (every replica would see "
            "every GPU, the compile caches would land inside the container, outside the cache "
            "store); give [engine] runtime = \"podman\" or \"docker\" and image = "
            "\"<name>@sha256:<digest>\", with command the engine's own, or run the engine on "
            "the host (docs/launch.md, \"Containers\")")


def render_nodes(sysfs_root: Path, pci_pair: Sequence[str]) -> tuple[str, ...]:
    """`/dev/dri/renderD<minor>` of each GPU of the pair: the minor is KFD's drm_render_minor,
    and `class/drm/renderD<minor>/device` must be that GPU. A ConfigError (exit 2) naming the
    GPU otherwise: a container given the wrong node would run on another GPU."""
    minors = dict(read_kfd_topology(sysfs_root).render_minor_by_address)
    out = []
    for address in pci_pair:
        minor = minors.get(address)
        if minor is None:
            raise ConfigError(
                f"GPU {address}: KFD gives it no drm_render_minor under {sysfs_root}/class/kfd: "
                "cannot tell its render node for the container",
                hint="check that amdgpu and KFD see the GPU (rocmseat preflight)")
        device, error = render_node_device(sysfs_root, minor)
        if device is None or device.name != address:
            seen = error or f"is {device.name if device else 'nothing'}"
            raise ConfigError(
                f"GPU {address}: KFD says renderD{minor}, but class/drm/renderD{minor}/device "
                f"{seen}: the render node is not the GPU's; refusing to pass it",
                hint="the DRM and KFD views of the node disagree: run rocmseat preflight")
        out.append(f"/dev/dri/renderD{minor}")
    return tuple(out)


def device_groups(dev_root: Path, devices: Sequence[str]) -> tuple[int, ...]:
    """The owning groups of /dev/kfd and the render nodes on this host (what a non-root engine
    needs to open them), by number; a node that cannot be read adds none."""
    gids = set()
    for device in ("/dev/kfd", *devices):
        try:
            gids.add(os.stat(dev_root / device.removeprefix("/dev/")).st_gid)
        except OSError:
            continue
    return tuple(sorted(g for g in gids if g != 0))


def container_env(seat: Seat, plan: ReplicaPlan) -> dict[str, str]:
    """The engine's variables inside the container: the plan's, with HIP_VISIBLE_DEVICES in the
    container's numbering (its only GPUs are the pair's, 0..tp-1) and no ROCR mask."""
    env = {k: v for k, v in plan.env.items() if k != "ROCR_VISIBLE_DEVICES"}
    if plan.pci_pair:
        env["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(plan.pci_pair)))
    return env


def mounts(seat: Seat, plan: ReplicaPlan) -> tuple[tuple[Path, bool], ...]:
    """(path, read-only) bind-mounted at the same path: the replica's cache dir, the model and
    the drafter."""
    out: list[tuple[Path, bool]] = [(plan.cache_dir, False), (seat.model.path, True)]
    if seat.drafter is not None and seat.drafter.path is not None:
        out.append((seat.drafter.path, True))
    return tuple(out)


def container_argv(seat: Seat, plan: ReplicaPlan, devices: Sequence[str], *,
                   gids: Sequence[int] = (), dev_root: Path = Path("/dev")) -> tuple[str, ...]:
    """`podman run ...` / `docker run ...` in the foreground for the replica (module doc)."""
    runtime, image = seat.engine.runtime, seat.engine.image
    assert runtime != "host" and image is not None  # the seat model's rule
    engine = plan.engine_argv

    def device(path: str) -> str:
        host = dev_root / path.removeprefix("/dev/")
        return f"--device={path}" if host == Path(path) else f"--device={host}:{path}"

    argv = [runtime, "run", "--rm", f"--name=rocmseat-{seat.name}-{plan.replica}"]
    if runtime == "podman":
        argv.append("--replace")  # a container left by a killed launch does not block the name
    argv += ["--network=host", "--ipc=host", "--security-opt=seccomp=unconfined"]
    if plan.pci_pair:
        argv += [device("/dev/kfd"), *(device(d) for d in devices)]
        argv += [f"--group-add={g}" for g in gids]
    binding = plan.binding
    if binding.numa_node is not None and binding.cpulist:
        argv += [f"--cpuset-cpus={binding.cpulist}", f"--cpuset-mems={binding.numa_node}"]
    argv += [f"--env={name}" for name in sorted(container_env(seat, plan))]
    for path, read_only in mounts(seat, plan):
        argv.append(f"--volume={path}:{path}{':ro' if read_only else ''}")
    argv += [f"--entrypoint={engine[0]}", image, *engine[1:]]
    return tuple(argv)


def quadlet_container(seat: Seat, plan: ReplicaPlan, devices: Sequence[str], *,
                      gids: Sequence[int] = ()) -> str:
    """The Quadlet `.container` file of the replica (podman-container.unit(5): each key the
    `podman run` flag of container_argv; what has no key goes in PodmanArgs=)."""
    image = seat.engine.image
    assert image is not None
    engine = plan.engine_argv
    lines = ["# Rendered by rocmseat from the seat file: edit the seat and render again",
             "[Unit]", f"Description=rocmseat {seat.name} replica {plan.replica} (container)",
             "", "[Container]", f"ContainerName=rocmseat-{seat.name}-{plan.replica}",
             f"Image={image}", "Network=host"]
    if plan.pci_pair:
        lines += [f"AddDevice={d}" for d in ("/dev/kfd", *devices)]
    for name, value in sorted(container_env(seat, plan).items()):
        lines.append(f"Environment={shlex.quote(f'{name}={value}')}")
    for path, read_only in mounts(seat, plan):
        lines.append(f"Volume={path}:{path}{':ro' if read_only else ''}")
    extra = ["--ipc=host", "--security-opt=seccomp=unconfined", f"--entrypoint={engine[0]}"]
    extra += [f"--group-add={g}" for g in gids]
    if plan.binding.numa_node is not None and plan.binding.cpulist:
        extra += [f"--cpuset-cpus={plan.binding.cpulist}",
                  f"--cpuset-mems={plan.binding.numa_node}"]
    lines += [f"PodmanArgs={shlex.join(extra)}", f"Exec={shlex.join(engine[1:])}", "",
              "[Service]", "Restart=on-failure",
              f"TimeoutStartSec={int(seat.readiness.timeout_s) + 180}", "",
              "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


def quadlet_supported(version_text: str) -> bool:
    """`podman --version` says 4.4 or later: Quadlet's first release."""
    words = version_text.split()
    parts = words[-1].split(".") if words else []
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return False
    return (major, minor) >= (4, 4)


def containerized(seat: Seat, plan: ReplicaPlan, sysfs_root: Path | None, *,
                  dev_root: Path = Path("/dev")) -> ReplicaPlan:
    """The plan whose argv is the runtime's command (a host seat's plan as it is)."""
    import dataclasses

    if seat.engine.runtime == "host":
        return plan
    devices = render_nodes(sysfs_root, plan.pci_pair) if plan.pci_pair and sysfs_root else ()
    argv = container_argv(seat, plan, devices, gids=device_groups(dev_root, devices),
                          dev_root=dev_root)
    binding = plan.binding
    if binding.numa_node is not None and binding.cpulist:
        binding = dataclasses.replace(
            binding, method="cpuset", note=f"--cpuset-cpus={binding.cpulist} "
            f"--cpuset-mems={binding.numa_node} (the container's cgroup; no numactl inside)")
    # the client's environment is what `--env NAME` copies: the container's numbering
    return dataclasses.replace(plan, argv=argv, env=container_env(seat, plan), binding=binding)
