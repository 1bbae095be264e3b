"""systemd units of a seat, rendered from the templates in systemd/ (pure: text in, text out).

One unit FILE per replica (`rocmseat-<seat>-<replica>.service`), not a template unit
`rocmseat-<seat>@.service`: each replica has its own GPU pair (its ExecStartPre= preflight
names the pair), NUMA node and port, fixed by the plan when the unit is rendered. A template
instance would need a drop-in per replica to carry the pair, splitting one replica's truth
across two files; one file per replica is what `systemctl cat` shows whole, what a golden test
pins, and what `systemd-analyze verify` checks directly. Plus a oneshot node preflight unit
(rocm seats) and the watchdog unit (`rocmseat watch SEAT`).
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmseat.errors import ConfigError, ReadError
from rocmseat.placement.groups import group_pairs
from rocmseat.placement.record import ReplicaPlacement
from rocmseat.placement.rules import located
from rocmseat.seat.model import Seat
from rocmseat.seat.naming import RESERVED_REPLICA_NAMES

PREFLIGHT_MARGIN_S = 180  # preflight with the HIP probe, the config key and the cache move
# each further pair of a TP group the HIP probe checks (28 for TP8): 2.2 s a pair measured
# against the fake library on a shared 2-core host (tests/hip/test_group_probe.py), a real GPU
# pair's IPC and copy stages a few seconds more
HIP_PAIR_S = 10
STOP_GRACE_S = 30  # `rocmseat launch --stop-grace`: SIGTERM -> SIGKILL of the engine
RESTART_SEC = 30
BURST, BURST_WINDOW_S = 5, 3600
_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")
_HOME_ROOTS = (Path("/home"), Path("/root"), Path("/run/user"))
# The first line of every rendered unit: the hash of the lines after it. `systemd install`
# replaces a unit only while it still matches (a hand edit changes it).
RENDERED_HEADER = "# Rendered by `rocmseat systemd render`"
_STAMP = re.compile(re.escape(RENDERED_HEADER) + r"; sha256:([0-9a-f]{64}) of the lines below\n")
# Exec* prefixes systemd reads off the first word (systemd.service(5), "Command lines").
_EXEC_PREFIXES = "@-:+!|"


@dataclass(frozen=True, slots=True)
class UnitContext:
    rocmseat_bin: Path  # absolute path of the installed `rocmseat` script
    seat_file: Path  # absolute
    state_dir: Path
    user: str | None = None  # run as this user (default: root)


def template_dirs() -> tuple[Path, ...]:
    """Where the unit templates are looked for, in order: the checkout's systemd/ (an editable
    install), then `<sys.prefix>/share/rocmseat/systemd` (a wheel's data-files)."""
    return (Path(__file__).resolve().parents[2] / "systemd",
            Path(sys.prefix) / "share" / "rocmseat" / "systemd")


# Groups that open the GPU device nodes for a non-root User=: udev gives /dev/kfd and
# /dev/dri/renderD* to `render`, /dev/dri/card* to `video`. Root needs neither (DAC override).
# A group missing on the host is not caught by `systemd-analyze verify`; systemd then refuses
# the start: status=216/GROUP "Failed to determine supplementary groups" (src/core/execute.c).
DEVICE_GROUPS = ("render", "video")


def unit_groups(seat: Seat, ctx: UnitContext) -> tuple[str, ...]:
    return DEVICE_GROUPS if seat.backend == "rocm" and ctx.user else ()


def unit_names(seat: Seat, records: Sequence[ReplicaPlacement]) -> dict[str, str]:
    """Replica name, "watch", "preflight" -> unit file name. A replica named like one of the
    seat's own units would be rendered onto it (the seat loader refuses those names:
    rocmseat.seat.rules; this is the second lock)."""
    names = {r.replica: f"rocmseat-{seat.name}-{r.replica}.service" for r in records}
    for own in RESERVED_REPLICA_NAMES:
        if own in names:
            raise located(seat, ("replicas", "names"),
                          f"replica name {own!r} is the name of the seat's own "
                          f"rocmseat-{seat.name}-{own}.service unit")
    names["watch"] = f"rocmseat-{seat.name}-watch.service"
    if seat.backend == "rocm":
        names["preflight"] = f"rocmseat-{seat.name}-preflight.service"
    return names


# ----- how systemd reads a value (systemd.syntax(7) "Quoting", systemd.unit(5) "Specifiers",
# systemd.service(5) "Command lines", systemd.exec(5)) -----------------------------------------


def has_control(value: str) -> bool:
    """A control character (C0, DEL, C1): NUL, CR and LF end a unit line, the rest have no place
    in one."""
    return any(unicodedata.category(c) == "Cc" for c in value)


def _quoted(text: str) -> str:
    """One word for a setting that unquotes with C escapes: as is when it has no space, quote
    or backslash; else double-quoted with `\\` and `\"`."""
    if text and not re.search(r"[\s\"'\\;]", text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def quote_arg(arg: str, *, first: bool = False) -> str:
    """One word of an Exec*= command line. Every `%` is a specifier (`%%` is a literal one);
    `$` starts a variable in the arguments (`$$` is a literal one) but not in the program path,
    which systemd takes literally apart from specifiers (so `first` keeps `$` as is)."""
    if has_control(arg):
        raise ValueError(f"{arg!r} contains a control character")
    text = arg.replace("%", "%%")
    if not first:
        text = text.replace("$", "$$")
    elif text[:1] in _EXEC_PREFIXES or not text:
        raise ValueError(f"{arg!r} cannot be an Exec program: systemd reads its first character "
                         "as a prefix")
    return _quoted(text)


def exec_line(argv: Sequence[str | Path]) -> str:
    return " ".join(quote_arg(str(a), first=i == 0) for i, a in enumerate(argv))


def path_word(path: str | Path) -> str:
    """One path of ReadWritePaths= (and the other namespace path lists): unquoted with C
    escapes and specifier-expanded, no variable expansion, so only `%` is doubled."""
    text = str(path)
    if has_control(text):
        raise ValueError(f"{text!r} contains a control character")
    if not text.startswith("/"):
        raise ValueError(f"{text!r} is not an absolute path")
    return _quoted(text.replace("%", "%%"))


def plain(value: str) -> str:
    """Free text of a specifier-expanding setting (Description=, User=, SyslogIdentifier=)."""
    if has_control(value):
        raise ValueError(f"{value!r} contains a control character")
    return value.replace("%", "%%")


def stamp(text: str) -> str:
    """The unit with its first line: the header and the sha256 of the text below it."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return f"{RENDERED_HEADER}; sha256:{digest} of the lines below\n{text}"


def rendered_state(text: str) -> str:
    """'pristine': a unit rocmseat rendered, not edited since (its hash matches); 'edited': our
    header but other lines (a hand edit); 'foreign': no header of ours (someone's own unit, or
    one rendered by a rocmseat that wrote no hash: its edits cannot be told)."""
    match = _STAMP.match(text)
    if match is None:
        return "foreign"
    body = text[match.end():]
    return ("pristine" if hashlib.sha256(body.encode("utf-8")).hexdigest() == match.group(1)
            else "edited")


def substitute(template: str, values: Mapping[str, str]) -> str:
    """Replace @NAME@; a line that is only a placeholder whose value is empty disappears."""
    missing = sorted(set(_PLACEHOLDER.findall(template)) - set(values))
    if missing:
        raise KeyError(f"template placeholders without a value: {', '.join(missing)}")
    out = []
    for line in template.splitlines():
        whole = _PLACEHOLDER.fullmatch(line.strip())
        if whole is not None and not values[whole.group(1)]:
            continue
        out.append(_PLACEHOLDER.sub(lambda m: values[m.group(1)], line))
    return "\n".join(out) + "\n"


def _protect_home(seat: Seat) -> str:
    paths = [seat.model.path, seat.engine.python, seat.source_path or Path("/")]
    if seat.drafter is not None and seat.drafter.path is not None:
        paths.append(seat.drafter.path)
    under_home = any(p.is_relative_to(h) for p in paths for h in _HOME_ROOTS)
    return "read-only" if under_home else "yes"


def remediation_writes(seat: Seat, replica_units: Sequence[str]) -> list[Path]:
    """What remediation writes outside the cache root and the state dir, for the watch unit's
    ReadWritePaths= (docs/remediate.md): with `[remediate] mode = "on"` and systemd restarts (no
    restart_command), the no-drafter drop-in beside each replica unit, `<unit_dir>/<unit>.d/`
    (rocmseat.watch.remediate.actions SeatEdge.dropin_path). Moving a cache aside renames
    within the cache root, and the journal is in the state dir: both are writable already."""
    settings = seat.remediate
    if settings.mode != "on" or settings.restart_command is not None:
        return []
    return sorted(settings.unit_dir / f"{unit}.d" for unit in replica_units)


def check_remediation_user(seat: Seat, ctx: UnitContext) -> None:
    """Refuse `--user` with remediation restarting units through systemd: a watcher that is not
    root needs a polkit rule to `systemctl restart` a system unit, and a drop-in directory it
    can write lets it set User=root on the replica unit: the watch unit must run as root."""
    settings = seat.remediate
    if ctx.user is not None and settings.mode == "on" and settings.restart_command is None:
        raise ConfigError(
            f"seat {seat.name}: [remediate] mode = \"on\" restarts the replica units through "
            f"systemd, which the watch unit cannot do as --user {ctx.user} (systemctl restart "
            "of a system unit needs a polkit rule, and a writable drop-in directory would let "
            "that user run the replica as root)",
            hint="render without --user, or set [remediate] restart_command (docs/remediate.md)")


# What a container runtime's client writes outside the seat's dirs: Podman its image and
# container storage and run state (containers-storage.conf(5): graphroot /var/lib/containers/
# storage, runroot /run/containers/storage; libpod's tmp dir /run/libpod); Docker's client
# talks to the daemon's socket and writes nothing.
CONTAINER_STATE: dict[str, tuple[str, ...]] = {
    "podman": ("/var/lib/containers", "/run/containers", "/run/libpod"),
    "docker": (),
}


def hardening(seat: Seat, ctx: UnitContext, *, devices: bool,
              extra_writable: Sequence[Path] = ()) -> str:
    writable = sorted({str(seat.cache_root), str(ctx.state_dir)}) + [str(p) for p in
                                                                    extra_writable]
    container = seat.engine.runtime != "host"
    if container:  # the runtime's storage and run state (docs/launch.md, "Containers")
        writable += [p for p in CONTAINER_STATE.get(seat.engine.runtime, ()) if p not in writable]
    lines = [
        "ProtectSystem=strict",
        "ReadWritePaths=" + " ".join(path_word(p) for p in writable),
        f"ProtectHome={_protect_home(seat)}",
        "PrivateTmp=yes",
        "NoNewPrivileges=yes",
        # the OCI runtime the client starts writes the container's cgroup (its cpuset)
        f"ProtectControlGroups={'no' if container else 'yes'}",
        "ProtectKernelModules=yes",
        "RestrictRealtime=yes",
        "LockPersonality=yes",
        # closed: only the pseudo devices (/dev/null, zero, urandom ...) plus what is listed.
        "DevicePolicy=closed",
    ]
    if devices and seat.backend == "rocm":
        # /dev/kfd is the compute interface HIP opens; char-drm covers /dev/dri/card* and
        # renderD* of every GPU (the pair is chosen by HIP_VISIBLE_DEVICES, not by the unit).
        lines += ["DeviceAllow=/dev/kfd rw", "DeviceAllow=char-drm rw"]
        if unit_groups(seat, ctx):
            lines.append("SupplementaryGroups=" + " ".join(unit_groups(seat, ctx)))
    return "\n".join(lines)


def _common(seat: Seat, ctx: UnitContext, *, devices: bool,
            extra_writable: Sequence[Path] = ()) -> dict[str, str]:
    dirs = sorted({str(seat.cache_root), str(ctx.state_dir)})
    # '+': runs outside the sandbox, so the writable paths exist before it is set up; with
    # User= they must belong to that user (the cache store refuses a root of another owner).
    # The remediation drop-in dirs are root's (check_remediation_user: no User= then).
    make = (["install", "-d", "-o", ctx.user, *dirs] if ctx.user
            else ["mkdir", "-p", *dirs, *(str(p) for p in extra_writable)])
    return {
        "SEAT": plain(seat.name),
        "USER": f"User={plain(ctx.user)}" if ctx.user else "",
        "HARDENING": hardening(seat, ctx, devices=devices, extra_writable=extra_writable),
        "PREPARE_DIRS": "ExecStartPre=+" + exec_line(make),
    }


def preflight_argv(seat: Seat, ctx: UnitContext, pairs: Sequence[Sequence[str]]) -> list[str]:
    """The node unit's `rocmseat preflight`: sysfs families only. The HIP probe runs once per
    replica start, in launch's gate (launch/gate.py), not here as well."""
    argv = [str(ctx.rocmseat_bin), "preflight", "--state-dir", str(ctx.state_dir)]
    for group in pairs:
        # a TP group's every pair (rocmseat.placement.groups.group_pairs): 28 for TP8
        for a, b in group_pairs(group):
            argv += ["--pair", f"{a},{b}"]
    if seat.preflight.profile is not None:
        argv += ["--profile", str(seat.preflight.profile)]
    argv.append("--no-hip")
    return argv


# User= takes a user name or a numeric uid (systemd.exec(5), "User=, Group="); rocmseat takes
# the portable subset of names (useradd's default NAME_REGEX, at most 32 characters) or a uid
# below 2^32 - 1 (which is "no uid"), so nothing but one word ever reaches the unit.
_USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,30}\$?")
_UID = re.compile(r"0|[1-9][0-9]{0,9}")


def check_user(user: str) -> str:
    """`--user` as a user name or a uid, else a ConfigError naming it (a space would make it
    two words of User=, a line end a line of its own)."""
    if _USER_NAME.fullmatch(user) or (_UID.fullmatch(user) and int(user) < 2**32 - 1):
        return user
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in user)[:80]
    raise ConfigError(f"--user {shown!r} is not a user name ([a-z_][a-z0-9_-]*, at most 32 "
                      "characters) or a numeric uid: it cannot go into User=")


def check_unit_values(seat: Seat, ctx: UnitContext) -> None:
    """Defence in depth (the seat loader refuses them too): a control character in anything a
    unit carries is a one-line error naming where it came from, before anything is rendered.
    A NUL, CR or LF would end the unit line and start another (`ExecStartPre=+...` as root)."""
    seat_values: list[tuple[tuple[str | int, ...], str]] = [
        (("cache_root",), str(seat.cache_root)), (("name",), seat.name)]
    if seat.state_dir is not None:
        seat_values.append((("state_dir",), str(seat.state_dir)))
    if seat.preflight.profile is not None:
        seat_values.append((("preflight", "profile"), str(seat.preflight.profile)))
    for loc, value in seat_values:
        if has_control(value):
            raise located(seat, loc, f"{value!r} contains a control character: it cannot go "
                          "into a systemd unit")
    options = [("--state-dir", str(ctx.state_dir)), ("--rocmseat-bin", str(ctx.rocmseat_bin)),
               ("the seat file's path", str(ctx.seat_file)), ("--user", ctx.user or "")]
    for what, value in options:
        if has_control(value):
            raise ConfigError(f"{what} {value!r} contains a control character: it cannot go "
                              "into a systemd unit")
    if ctx.user is not None:
        check_user(ctx.user)


def render_units(seat: Seat, records: Sequence[ReplicaPlacement], ctx: UnitContext,
                 templates: Mapping[str, str]) -> dict[str, str]:
    """File name -> unit text. `templates`: replica/preflight/watch template texts. Every name,
    pair, NUMA node and port is the placement's (rocmseat.placement)."""
    check_unit_values(seat, ctx)
    check_remediation_user(seat, ctx)
    try:
        return _render(seat, records, ctx, templates)
    except ValueError as exc:  # a value no unit can carry, missed by the check above
        raise ConfigError(f"seat {seat.name}: cannot render its units: {exc}") from None


def _render(seat: Seat, records: Sequence[ReplicaPlacement], ctx: UnitContext,
            templates: Mapping[str, str]) -> dict[str, str]:
    names = unit_names(seat, records)
    replica_units = [names[r.replica] for r in records]
    units: dict[str, str] = {}
    preflight_unit = names.get("preflight")
    for record in records:
        values = _common(seat, ctx, devices=True)
        place = ("GPUs " + " ".join(record.pci_pair) if record.pci_pair else "backend cpu")
        if record.numa.node is not None:
            place += f", NUMA node {record.numa.node}"
        launch = [str(ctx.rocmseat_bin), "launch", str(ctx.seat_file), "--replica",
                  record.replica, "--state-dir", str(ctx.state_dir)]
        if record.pci_pair:
            # The pair is the replica's identity, fixed here: launch refuses to start the
            # replica anywhere else (docs/launch.md, "A replica's pair is its identity").
            launch += ["--pair", ",".join(record.pci_pair)]
        preflight = ""
        if record.pci_pair:
            # The pair's sysfs checks, judged by launch's own rule (refuse_on_fail included,
            # so no '-' prefix); launch then runs only the HIP probe (launch/gate.py).
            preflight = "ExecStartPre=" + exec_line([*launch, "--preflight-only"])
        launch += ["--stop-grace", str(STOP_GRACE_S)]
        values |= {
            "REPLICA": plain(record.replica),
            "PLACE": plain(place),
            "PORT": str(record.port),
            "AFTER": " ".join(["network-online.target", *([preflight_unit] if preflight_unit
                                                           else [])]),
            "BURST": str(BURST),
            "BURST_WINDOW": str(BURST_WINDOW_S),
            "PREFLIGHT": preflight,
            "LAUNCH": exec_line(launch),
            "READY_TIMEOUT": f"{seat.readiness.timeout_s:g}",
            "START_TIMEOUT": str(math.ceil(seat.readiness.timeout_s) + PREFLIGHT_MARGIN_S
                                 + HIP_PAIR_S * max(0, len(group_pairs(record.pci_pair)) - 1)),
            "GRACE": str(STOP_GRACE_S),
            "STOP_TIMEOUT": str(STOP_GRACE_S + 30),
            "RESTART_SEC": str(RESTART_SEC),
        }
        units[names[record.replica]] = substitute(templates["replica"], values)
    if preflight_unit is not None:
        pairs = [r.pci_pair for r in records if r.pci_pair]
        values = _common(seat, ctx, devices=False)
        values |= {
            "BEFORE": " ".join(replica_units),
            "PREFLIGHT": exec_line(preflight_argv(seat, ctx, pairs)),
        }
        units[preflight_unit] = substitute(templates["preflight"], values)
    values = _common(seat, ctx, devices=False,
                     extra_writable=remediation_writes(seat, replica_units))
    values |= {
        "AFTER": " ".join(replica_units),
        "WATCH": exec_line([str(ctx.rocmseat_bin), "watch", str(ctx.seat_file), "--state-dir",
                            str(ctx.state_dir)]),
    }
    units[names["watch"]] = substitute(templates["watch"], values)
    return {name: stamp(text) for name, text in units.items()}


def load_templates(directory: Path | None = None) -> dict[str, str]:
    """The three templates from `directory`, else from the first of template_dirs() that has
    them; ReadError naming every place looked in."""
    candidates = (directory,) if directory is not None else template_dirs()
    base = next((d for d in candidates if (d / "replica.service.in").is_file()), candidates[0])
    out = {}
    for kind in ("replica", "preflight", "watch"):
        path = base / f"{kind}.service.in"
        try:
            out[kind] = path.read_text(encoding="utf-8")
        except OSError as exc:
            looked = " or ".join(str(d) for d in candidates)
            raise ReadError(path, f"{exc.strerror or exc} (unit templates looked for in "
                            f"{looked})", hint="install rocmseat from a checkout (pip install "
                            "-e .) or with its data-files (share/rocmseat/systemd)") from None
    return out


# The drop-in remediation step 2 installs beside a replica's unit (docs/remediate.md);
# `rocmseat remediate reset` removes it. systemd.unit(5), "drop-in": an empty ExecStart=
# clears the unit's own before the new one is added (a service may have only one).
NO_DRAFTER_DROPIN = "50-rocmseat-no-drafter.conf"


def no_drafter_dropin(unit_text: str, *, why: str, flag: str = "--no-drafter") -> str:
    """The drop-in that runs a rendered replica unit's launch without its drafter. ValueError
    when `unit_text` is not a replica unit rocmseat rendered and nobody edited since (its
    ExecStart= is then not known to be launch's)."""
    if rendered_state(unit_text) != "pristine":
        raise ValueError("the unit was not rendered by rocmseat, or was edited since: its "
                         "ExecStart= is not known to be rocmseat launch")
    starts = [line for line in unit_text.splitlines() if line.startswith("ExecStart=")]
    if len(starts) != 1 or " launch " not in starts[0]:
        raise ValueError("the unit has no single `rocmseat launch` ExecStart= line")
    return stamp(
        f"# Remediation step 2 ({plain(why)}): the replica runs without its drafter.\n"
        "# Removed by `rocmseat remediate reset`; do not edit.\n"
        f"[Service]\nExecStart=\n{starts[0]} {quote_arg(flag)}\n")
