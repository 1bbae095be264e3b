"""The install policy of a seat's systemd units: what is rendered for this host, what may be
replaced on disk, and the traps a unit would fall into (docs/launch.md, "systemd units").

`render_for_host` renders the units (rocmseat.launch.units, pure) and judges them for the host
they are for: a group SupplementaryGroups= names that the host lacks, a path the unit must read
or write under /tmp or /var/tmp while the unit has PrivateTmp=yes. On the live system
(`live=True`, `systemd install` without --root) each is a ConfigError with the fix; for another
system (an image, `--root`) or a render, a warning line through `warn`. `install_units` writes
them, never over someone's own unit or a hand-edited one (unless forced), and reloads systemd.
Nothing here prints: lines go through the callables the CLI passes.
"""

from __future__ import annotations

import dataclasses
import grp
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat.errors import ConfigError, ReadError, RocmseatError
from rocmseat.runner import Runner, run
from rocmseat.seat.model import Seat

UNIT_DIR = Path("etc/systemd/system")
UNIT_LIMIT_BYTES = 1 << 20  # a unit is a few KiB
# PrivateTmp=yes gives the unit its own empty /tmp and /var/tmp (systemd.exec(5), "PrivateTmp=").
PRIVATE_TMP = (Path("/tmp"), Path("/var/tmp"))

Say = Callable[[str], None]


def default_bin() -> Path:
    """The `rocmseat` script the units run: the one beside this Python, else on PATH."""
    beside = Path(sys.executable).parent / "rocmseat"
    if beside.is_file():
        return beside
    found = shutil.which("rocmseat")
    if found is None:
        raise RocmseatError("cannot find the installed `rocmseat` script",
                            hint="pass --rocmseat-bin /absolute/path/to/rocmseat")
    return Path(found)


def missing_groups(groups: tuple[str, ...]) -> list[str]:
    missing = []
    for group in groups:
        try:
            grp.getgrnam(group)
        except KeyError:
            missing.append(group)
    return missing


def _judge(what: str, hint: str, *, refuse: bool, warn: Say, prefix: str = "") -> None:
    if refuse:
        raise ConfigError(f"{prefix}{what}", hint=hint)
    warn(f"rocmseat: warning: {what}; {hint}")


def check_groups(groups: tuple[str, ...], *, refuse: bool, warn: Say) -> None:
    """SupplementaryGroups= naming a group this host lacks: systemd-analyze verify passes, but
    systemd refuses every start with status=216/GROUP (a restart loop under Restart=)."""
    missing = missing_groups(groups)
    if not missing:
        return
    what = (f"group {', '.join(repr(g) for g in missing)} does not exist on this host: "
            "systemd would refuse to start the units (status=216/GROUP, \"Failed to determine "
            "supplementary groups\")")
    hint = "create it (groupadd --system NAME; Debian's udev package makes render) or drop --user"
    _judge(what, hint, refuse=refuse, warn=warn, prefix="SupplementaryGroups=: ")


def check_profile(seat: Seat) -> None:
    """A profile the units' preflight cannot load refuses the render and the install (exit 2):
    every start would fail its ExecStartPre= (`cannot read the profile`), five times an hour."""
    from rocmseat.launch.gate import profile_problem

    problem = profile_problem(seat)
    if problem is not None:
        raise ConfigError(problem, hint="a relative [preflight] profile is relative to the seat "
                          "file's directory: copy the profile along (docs/install.md, \"Seat "
                          "files and profiles\") or give its absolute path")


def unit_paths(seat: Seat, ctx_paths: Mapping[str, Path]) -> list[tuple[str, Path]]:
    """(where it comes from, path) for every path a unit's processes read or write: the
    ExecStart= words (the rocmseat script, the seat file, the state dir, the profile), the
    ReadWritePaths= (cache root, state dir) and what launch then opens (engine Python, model,
    drafter)."""
    paths = list(ctx_paths.items())
    paths += [("cache_root", seat.cache_root), ("engine.python", seat.engine.python),
              ("model.path", seat.model.path)]
    if seat.drafter is not None and seat.drafter.path is not None:
        paths.append(("drafter.path", seat.drafter.path))
    if seat.preflight.profile is not None:
        paths.append(("preflight.profile", seat.preflight.profile))
    return paths


def private_tmp_paths(paths: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    return [(where, p) for where, p in paths
            if any(p == t or p.is_relative_to(t) for t in PRIVATE_TMP)]


def check_private_tmp(seat: Seat, ctx_paths: Mapping[str, Path], units: Mapping[str, str], *,
                      refuse: bool, warn: Say) -> None:
    """A unit with PrivateTmp=yes sees its own empty /tmp and /var/tmp: a seat file, script,
    model or cache there is not found (or written where nobody ever reads it again), and
    `systemd-analyze verify` does not say so."""
    if not any("\nPrivateTmp=yes\n" in text for text in units.values()):
        return
    hidden = private_tmp_paths(unit_paths(seat, ctx_paths))
    if not hidden:
        return
    listed = ", ".join(f"{where} {path}" for where, path in hidden)
    what = (f"{listed}: under /tmp or /var/tmp, which the units cannot see (they run with "
            "PrivateTmp=yes: a private, empty /tmp and /var/tmp of their own)")
    hint = ("move them out of /tmp and /var/tmp (e.g. /srv/rocmseat, /var/lib/rocmseat, "
            "/var/cache/rocmseat) and render again")
    _judge(what, hint, refuse=refuse, warn=warn)


@dataclass(frozen=True, slots=True)
class Rendered:
    seat: Seat
    units: dict[str, str]  # file name -> text
    # a podman seat on a host whose Podman has Quadlet: file name -> `.container` text
    quadlets: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def start_units(self) -> list[str]:
        """What `systemctl enable --now` needs: every replica and the watchdog (nothing pulls
        the watch unit in). The node preflight unit comes with the replicas (their Wants=)."""
        return sorted(n for n in self.units if not n.endswith("-preflight.service"))


def render_for_host(seat_file: Path, *, sysfs_root: Path | None, state_dir: Path,
                    rocmseat_bin: Path | None, user: str | None, live: bool,
                    warn: Say) -> Rendered:
    """The seat's units for this host (`live`: installed into the running system, where a
    trap is refused; else warned about through `warn`)."""
    from rocmseat.launch import flow
    from rocmseat.launch.units import (
        UnitContext,
        check_user,
        load_templates,
        render_units,
        unit_groups,
    )
    from rocmseat.seat.load import load_seat

    if user is not None:
        check_user(user)
    seat = load_seat(seat_file)
    check_profile(seat)
    binary = rocmseat_bin if rocmseat_bin is not None else default_bin()
    # The units name each replica, pair, NUMA node and port as the placement does; the HIP
    # indices are not in them (launch numbers the pair at each start). Each replica keeps the
    # pair it ran on (its placement.json in the state dir): a re-render after a GPU is lost
    # never moves another replica onto its GPUs.
    placed = flow.place_for_launch(seat, sysfs_root if seat.backend == "rocm" else None,
                                   state_dir=state_dir)
    for name, problem in sorted(placed.problems.items()):
        warn(f"rocmseat: warning: {problem}: not used as replica {name}'s identity")
    for record in placed.records:
        if record.lost:
            warn(f"rocmseat: warning: replica {record.replica}: {record.lost}; its unit is "
                 "rendered with its own pair and will refuse to start until that pair is back")
    ctx = UnitContext(rocmseat_bin=binary, seat_file=seat_file.absolute(), state_dir=state_dir,
                      user=user)
    units = render_units(seat, placed.records, ctx, load_templates())
    check_groups(unit_groups(seat, ctx), refuse=live, warn=warn)
    check_private_tmp(seat, {"--rocmseat-bin": binary, "the seat file": ctx.seat_file,
                             "--state-dir": state_dir}, units, refuse=live, warn=warn)
    quadlets = quadlet_files(seat, placed.records, sysfs_root, warn=warn)
    return Rendered(seat, units, quadlets)


def quadlet_files(seat: Seat, records: Sequence[Any], sysfs_root: Path | None, *,
                  warn: Say, runner: Runner = run) -> dict[str, str]:
    """A Quadlet `.container` per replica of a podman seat when this host's Podman has Quadlet
    (4.4+, `podman --version`), named `rocmseat-<seat>-<replica>-engine.container` so the
    service Quadlet makes never takes the replica unit's name; else none, and one line saying
    the units run `podman run` in the foreground (docs/launch.md, "Containers")."""
    from rocmseat.launch.container import (
        containerized,
        device_groups,
        quadlet_container,
        quadlet_supported,
        render_nodes,
    )
    from rocmseat.launch.plan import plan_replica

    if seat.engine.runtime != "podman":
        return {}
    done = runner(["podman", "--version"], timeout_s=30)
    version = done.stdout.strip() if done.returncode == 0 else ""
    if not quadlet_supported(version):
        warn(f"rocmseat: note: {version or 'podman not found'}: no Quadlet (Podman 4.4+); the "
             "replica units run `podman run` in the foreground")
        return {}
    out = {}
    for record in records:
        if record.lost:
            continue
        plan = containerized(seat, plan_replica(seat, record, numactl=None), sysfs_root)
        devices = (render_nodes(sysfs_root, plan.pci_pair)
                   if plan.pci_pair and sysfs_root is not None else ())
        out[f"rocmseat-{seat.name}-{plan.replica}-engine.container"] = quadlet_container(
            seat, plan, devices, gids=device_groups(Path("/dev"), devices))
    return out


def read_unit(path: Path) -> str | None:
    """The unit file already at `path` (None: none), read as a regular file only: a FIFO there
    would hang `install`. A unit masked with `systemctl mask` (a link to /dev/null) is said."""
    from rocmseat.safeio import read_regular_text
    from rocmseat.text import printable

    try:
        if path.is_symlink() and os.path.realpath(path) == os.devnull:
            raise ConfigError(f"{path}: the unit is masked (a link to /dev/null): not "
                              "overwritten",
                              hint=f"unmask it first: systemctl unmask {path.name}")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the unit already there: "
                          f"{exc.strerror or exc}") from None
    if not os.path.lexists(path):
        return None
    try:
        return read_regular_text(path, limit_bytes=UNIT_LIMIT_BYTES)
    except ReadError as exc:
        raise ConfigError(f"cannot read the unit already there: {printable(exc.message, 300)}",
                          hint="move it away, then install again") from None


def kept_why(before: str | None, text: str) -> str | None:
    """Why an existing unit file must not be overwritten, or None: someone's own unit (no
    rocmseat header), or a unit rocmseat rendered and someone edited since (its content no
    longer matches the hash in its header). A re-render of an unedited unit is replaced."""
    from rocmseat.launch.units import rendered_state

    if before is None or before == text:
        return None
    state = rendered_state(before)
    if state == "pristine":
        return None
    if state == "edited":
        return "was edited after rocmseat rendered it (its content no longer matches the hash " \
               "in its first line)"
    return "was not rendered by rocmseat (or by one that kept no content hash)"


def write_unit(path: Path, text: str, where: str) -> None:
    from rocmseat.atomic import atomic_write_text

    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write ({where}): {exc.strerror or exc}") from None


def install_units(rendered: Rendered, *, root: Path | None, force: bool, say: Say) -> None:
    """Write the units into `<root or />/etc/systemd/system` (one `say` line per unit), then
    `systemctl daemon-reload` when installing into the running system (root None). Refuses,
    before writing anything, to replace a unit rocmseat did not render or that was edited
    (unless `force`)."""
    from rocmseat.runner import run

    units = rendered.units
    target = (root if root is not None else Path("/")) / UNIT_DIR
    kept = [(target / n, why) for n, text in sorted(units.items())
            if (why := kept_why(read_unit(target / n), text)) is not None]
    if kept and not force:
        path, why = kept[0]
        raise ConfigError(f"{path}: exists, differs and {why}; not overwritten"
                          + (f" (and {len(kept) - 1} more)" if len(kept) > 1 else ""),
                          hint="compare it with `rocmseat systemd render`, move it away, or "
                          "pass --force to replace it")
    for name, text in sorted(units.items()):
        path = target / name
        before = read_unit(path)
        if before == text:
            say(f"unchanged {path}")
            continue
        write_unit(path, text, "--root" if root is not None else "the unit directory")
        say(f"{'installed' if before is None else 'replaced'} {path}")
    if root is None:
        done = run(["systemctl", "daemon-reload"], timeout_s=60)
        if not done.ok:
            raise RocmseatError(f"systemctl daemon-reload failed: {done.stderr.strip()}")
    say("start with: systemctl enable --now " + " ".join(rendered.start_units))
