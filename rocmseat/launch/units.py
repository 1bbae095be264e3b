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

import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmseat.errors import ReadError
from rocmseat.launch.plan import ReplicaPlan
from rocmseat.seat.model import Seat

PREFLIGHT_MARGIN_S = 180  # preflight with the HIP probe, the config key and the cache move
STOP_GRACE_S = 30  # `rocmseat launch --stop-grace`: SIGTERM -> SIGKILL of the engine
RESTART_SEC = 30
BURST, BURST_WINDOW_S = 5, 3600
_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")
_HOME_ROOTS = (Path("/home"), Path("/root"), Path("/run/user"))


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


def unit_names(seat: Seat, plans: Sequence[ReplicaPlan]) -> dict[str, str]:
    names = {p.replica: f"rocmseat-{seat.name}-{p.replica}.service" for p in plans}
    names["watch"] = f"rocmseat-{seat.name}-watch.service"
    if seat.backend == "rocm":
        names["preflight"] = f"rocmseat-{seat.name}-preflight.service"
    return names


def quote_arg(arg: str) -> str:
    """One argument of an Exec line (systemd.service(5) "Command lines"): '%' is a specifier
    and '$' a variable, so both are doubled; an argument with space, quote or backslash is
    double-quoted with C-style escapes."""
    text = arg.replace("%", "%%").replace("$", "$$")
    if text and not re.search(r"[\s\"'\\;]", text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def exec_line(argv: Sequence[str | Path]) -> str:
    return " ".join(quote_arg(str(a)) for a in argv)


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


def hardening(seat: Seat, ctx: UnitContext, *, devices: bool) -> str:
    writable = sorted({str(seat.cache_root), str(ctx.state_dir)})
    lines = [
        "ProtectSystem=strict",
        "ReadWritePaths=" + " ".join(quote_arg(p) for p in writable),
        f"ProtectHome={_protect_home(seat)}",
        "PrivateTmp=yes",
        "NoNewPrivileges=yes",
        "ProtectControlGroups=yes",
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


def _common(seat: Seat, ctx: UnitContext, *, devices: bool) -> dict[str, str]:
    dirs = sorted({str(seat.cache_root), str(ctx.state_dir)})
    # '+': runs outside the sandbox, so the writable paths exist before it is set up; with
    # User= they must belong to that user (the cache store refuses a root of another owner).
    make = ["install", "-d", "-o", ctx.user, *dirs] if ctx.user else ["mkdir", "-p", *dirs]
    return {
        "SEAT": seat.name,
        "USER": f"User={ctx.user}" if ctx.user else "",
        "HARDENING": hardening(seat, ctx, devices=devices),
        "PREPARE_DIRS": "ExecStartPre=+" + exec_line(make),
    }


def preflight_argv(seat: Seat, ctx: UnitContext, pairs: Sequence[Sequence[str]]) -> list[str]:
    """The node unit's `rocmseat preflight`: sysfs families only. The HIP probe runs once per
    replica start, in launch's gate (launch/gate.py), not here as well."""
    argv = [str(ctx.rocmseat_bin), "preflight", "--state-dir", str(ctx.state_dir)]
    for pair in pairs:
        argv += ["--pair", ",".join(pair)]
    if seat.preflight.profile is not None:
        argv += ["--profile", str(seat.preflight.profile)]
    argv.append("--no-hip")
    return argv


def render_units(seat: Seat, plans: Sequence[ReplicaPlan], ctx: UnitContext,
                 templates: Mapping[str, str]) -> dict[str, str]:
    """File name -> unit text. `templates`: replica/preflight/watch template texts."""
    names = unit_names(seat, plans)
    replica_units = [names[p.replica] for p in plans]
    units: dict[str, str] = {}
    preflight_unit = names.get("preflight")
    for plan in plans:
        values = _common(seat, ctx, devices=True)
        place = ("GPUs " + " ".join(plan.pci_pair) if plan.pci_pair else "backend cpu")
        if plan.binding.numa_node is not None:
            place += f", NUMA node {plan.binding.numa_node}"
        launch = [str(ctx.rocmseat_bin), "launch", str(ctx.seat_file), "--replica",
                  plan.replica, "--state-dir", str(ctx.state_dir)]
        preflight = ""
        if plan.pci_pair:
            # The pair's sysfs checks, judged by launch's own rule (refuse_on_fail included,
            # so no '-' prefix); launch then runs only the HIP probe (launch/gate.py).
            preflight = "ExecStartPre=" + exec_line([*launch, "--preflight-only"])
        launch += ["--stop-grace", str(STOP_GRACE_S)]
        values |= {
            "REPLICA": plan.replica,
            "PLACE": place.replace("%", "%%"),
            "PORT": str(plan.port),
            "AFTER": " ".join(["network-online.target", *([preflight_unit] if preflight_unit
                                                           else [])]),
            "BURST": str(BURST),
            "BURST_WINDOW": str(BURST_WINDOW_S),
            "PREFLIGHT": preflight,
            "LAUNCH": exec_line(launch),
            "READY_TIMEOUT": f"{seat.readiness.timeout_s:g}",
            "START_TIMEOUT": str(math.ceil(seat.readiness.timeout_s) + PREFLIGHT_MARGIN_S),
            "GRACE": str(STOP_GRACE_S),
            "STOP_TIMEOUT": str(STOP_GRACE_S + 30),
            "RESTART_SEC": str(RESTART_SEC),
        }
        units[names[plan.replica]] = substitute(templates["replica"], values)
    if preflight_unit is not None:
        pairs = [p.pci_pair for p in plans if p.pci_pair]
        values = _common(seat, ctx, devices=False)
        values |= {
            "BEFORE": " ".join(replica_units),
            "PREFLIGHT": exec_line(preflight_argv(seat, ctx, pairs)),
        }
        units[preflight_unit] = substitute(templates["preflight"], values)
    values = _common(seat, ctx, devices=False)
    values |= {
        "AFTER": " ".join(replica_units),
        "WATCH": exec_line([str(ctx.rocmseat_bin), "watch", str(ctx.seat_file), "--state-dir",
                            str(ctx.state_dir)]),
    }
    units[names["watch"]] = substitute(templates["watch"], values)
    return units


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
