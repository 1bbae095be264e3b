"""Engine commands: what a seat's `[engine] command` really starts, and whether that is the
engine its `[engine] kind` names.

`look_through` follows the wrappers (sudo, env, nice, ionice, numactl, taskset, systemd-run) to
the program and stops at a container client (docker, podman, nerdctl) or `apptainer exec`:
launch refuses a command that starts a container itself (rocmseat.launch.container.
container_refusal) and the kind check reads the program the wrappers start. Pure.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rocmseat.engines import by_kind
from rocmseat.located import where_key

if TYPE_CHECKING:
    from rocmseat.seat.model import Seat

CONTAINER_CLIENTS = frozenset({"docker", "podman", "nerdctl"})
CONTAINER_EXECS = frozenset({"apptainer", "singularity"})

# Wrappers that start the program after their options, and their options that take a value as
# the next word (each tool's --help / man page: sudo(8), env(1), nice(1), ionice(1),
# numactl(8), taskset(1), systemd-run(1)). A value attached (`-n10`, `--unit=x`) needs no word.
_VALUED: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U", "--user",
                       "--group", "--chdir", "--close-from", "--host", "--prompt", "--role",
                       "--type", "--command-timeout", "--other-user"}),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir", "--split-string"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "--class", "--classdata"}),
    "numactl": frozenset({"-N", "-m", "-C", "-i", "-p", "-P", "-b", "--cpunodebind",
                          "--membind", "--physcpubind", "--interleave", "--preferred",
                          "--preferred-many", "--balancing"}),
    "taskset": frozenset(),
    "systemd-run": frozenset({"-u", "-p", "-E", "-M", "-H", "--unit", "--property",
                              "--setenv", "--machine", "--host", "--slice", "--uid", "--gid",
                              "--nice", "--working-directory", "--description",
                              "--on-active", "--on-boot", "--on-startup", "--on-unit-active",
                              "--on-unit-inactive", "--on-calendar", "--timer-property",
                              "--path-property", "--socket-property", "--service-type",
                              "--slice-inherit", "--background"}),
}
_APPTAINER_VALUED = frozenset({"-B", "--bind", "--env", "--env-file", "-H", "--home", "-o",
                               "--overlay", "--pwd", "-W", "--workdir", "--app", "--security",
                               "--network", "--network-args", "--hostname", "-S", "--scratch",
                               "--mount", "--config"})


@dataclass(frozen=True, slots=True)
class LookedThrough:
    """What an engine command really starts."""

    program: tuple[str, ...]  # the argv the wrappers start ((): they start nothing)
    wrappers: tuple[str, ...]  # their names, outermost first
    container: str | None  # "docker", "podman", "nerdctl", "apptainer exec", ... or None


def _after_options(name: str, argv: Sequence[str]) -> int:
    """The index of the first word after a wrapper's options (and, for env/sudo, its
    NAME=VALUE assignments; for taskset, its mask or list)."""
    valued = _VALUED[name]
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if name == "nice" and len(word) > 1 and word[0] == "-" and word[1:].isdigit():
            i += 1  # the old form: nice -10 cmd
            continue
        if not word.startswith("-") or word == "-":
            break
        i += 2 if word in valued else 1
    if name in ("env", "sudo"):
        while i < len(argv) and "=" in argv[i] and not argv[i].startswith(("=", "/")):
            i += 1
    if name == "taskset":
        i += 1  # the mask, or the list after -c
    return i


def look_through(argv: Sequence[str]) -> LookedThrough:
    """Follow `sudo`, `env`, `nice`, `ionice`, `numactl`, `taskset` and `systemd-run` to the
    program they start; `apptainer`/`singularity exec|run` and the container clients are where
    it stops: the program then runs in a container. `env -S "a b"` is split as env splits it."""
    rest = list(argv)
    wrappers: list[str] = []
    while rest:
        name = os.path.basename(rest[0])
        if name in CONTAINER_CLIENTS:
            return LookedThrough(tuple(rest), tuple(wrappers), name)
        if name in CONTAINER_EXECS:
            sub = next((w for w in rest[1:] if not w.startswith("-")), "")
            return LookedThrough(tuple(rest), tuple(wrappers), f"{name} {sub}".strip())
        if name not in _VALUED:
            return LookedThrough(tuple(rest), tuple(wrappers), None)
        wrappers.append(name)
        args = rest[1:]
        if name == "env":
            split = next((args[k + 1] for k, w in enumerate(args[:-1])
                          if w in ("-S", "--split-string")), None)
            split = split or next((w.split("=", 1)[1] for w in args
                                   if w.startswith("--split-string=")), None)
            if split is not None:
                rest = shlex.split(split) + args[_after_options(name, args):]
                continue
        rest = args[_after_options(name, args):]
    return LookedThrough((), tuple(wrappers), None)


def kind_problem(seat: Seat) -> str | None:
    """One located line when the seat's command does not look like its `[engine] kind`'s
    engine (after the wrappers), naming both; None when it does. For kind vllm (the default) a
    command is refused only when it looks like another engine (`llama-server`, `python -m
    sglang.launch_server`): an SGLang environment that carries vllm as a dependency would
    otherwise start with vLLM's flags."""
    engine = by_kind(seat.engine.kind)
    looked = look_through(seat.engine.command)
    program = looked.program
    if looked.container is not None:
        return None  # launch refuses a container command on its own (container_refusal)
    others = [k for k in ("vllm", "sglang", "llamacpp")
              if k != seat.engine.kind and by_kind(k).looks_like(program)]
    if engine.looks_like(program):
        return None
    if seat.engine.kind == "vllm" and not others:
        # the default kind, and the one every seat before the seam had: a command that looks
        # like no engine (a site's wrapper script, a test's stand-in) stays vLLM's; one that
        # looks like another engine is refused
        return None
    shown = str(seat.source_path) if seat.source_path is not None else None
    where = where_key(shown, ("engine", "command"), text=seat.source_text)
    started = " ".join(program[:3]) if program else "nothing"
    guess = (f" (it looks like {by_kind(others[0]).label}: kind = \"{others[0]}\"?)"
             if others else "")
    return (f"{where}: [engine] kind is \"{seat.engine.kind}\" ({engine.label}) but the command "
            f"starts {started!r}, which does not look like {engine.label}{guess}: launch would "
            f"hand it {engine.label}'s flags")
