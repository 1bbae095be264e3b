"""The edge of remediation: move a replica's caches aside, restart it, in its mode.

A restart goes through systemd for units rocmseat rendered (`systemctl restart` of the
replica's unit; the no-drafter mode through a drop-in beside it, removed when the replica goes
back to its drafter), or through the seat's `[remediate] restart_command` (argv, never a shell)
for other supervisors, which gets ROCMSEAT_SEAT, ROCMSEAT_REPLICA and ROCMSEAT_REMEDIATE_MODE.
Nothing here decides: rocmseat.watch.remediate.policy does.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rocmseat.errors import RocmseatError
from rocmseat.placement.record import ReplicaPlacement
from rocmseat.runner import Runner, run
from rocmseat.seat.model import Seat
from rocmseat.watch.remediate.mode import Mode

SYSTEMCTL_TIMEOUT_S = 60.0
UNIT_LIMIT_BYTES = 1 << 20


class ActionFailed(RocmseatError):
    """A remediation action could not be carried out (the step fails, its scope halts).

    Its text is redacted where it is made (rocmseat.redact.redact_output): it goes to the log,
    the state, the journal, the alerts and `remediate status` alike, so none of them may hold
    what a child printed in clear (a URL with a password, a token, a bearer header, an
    --api-key value)."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        from rocmseat.redact import redact_output
        from rocmseat.text import printable

        super().__init__(printable(redact_output(message), 400), hint=hint)


def _tail(text: str) -> str:
    """The last line a child printed (what a failure shows of it)."""
    return (text.strip().splitlines() or ["-"])[-1][:300]


class SeatEdge:
    """The actions on the replicas of one seat."""

    def __init__(self, seat: Seat, records: Mapping[str, ReplicaPlacement], *,
                 runner: Runner = run, environ: Mapping[str, str] | None = None) -> None:
        self.seat = seat
        self.records = dict(records)
        self.settings = seat.remediate
        self._run = runner
        self._environ = dict(os.environ if environ is None else environ)
        self.cancel = threading.Event()  # set: the watcher stops; a running restart ends

    def unit(self, replica: str) -> str:
        from rocmseat.launch.units import unit_names

        return unit_names(self.seat, [self.records[replica]])[replica]

    def move_cache_aside(self, replica: str, reason: Mapping[str, Any]) -> Path | None:
        from rocmseat.cache.store import move_aside

        record = self.records.get(replica)
        if record is None:
            raise ActionFailed(f"{replica}: no placement record: its cache dir is not known")
        try:
            return move_aside(record.cache_dir, reason=dict(reason))
        except OSError as exc:
            raise ActionFailed(f"{record.cache_dir}: cannot move it aside: "
                               f"{exc.strerror or exc}") from None

    def restart(self, replica: str, mode: str, *, why: str, reload: bool = False) -> None:
        """Restart `replica` in `mode` (Mode.DRAFTER or NO_DRAFTER); ActionFailed when it did not
        work (the command's exit code or systemctl's words). `reload`: systemd reloads its
        units even when the drop-in is as wanted (a reset after a failed daemon-reload)."""
        command = self.settings.restart_command
        if command is not None:
            env = {**self._environ, "ROCMSEAT_SEAT": self.seat.name,
                   "ROCMSEAT_REPLICA": replica, "ROCMSEAT_REMEDIATE_MODE": mode}
            done = self._run(list(command), env=env,
                             timeout_s=self.settings.ready_timeout_s, cancel=self.cancel)
            if not done.ok:
                how = ("ended: the watcher stopped" if done.cancelled else "timed out"
                       if done.timed_out else f"exited {done.returncode}")
                raise ActionFailed(f"{replica}: restart_command {command[0]} {how}: "
                                   f"{_tail(done.stderr or done.stdout)}")
            return
        if replica not in self.records:
            raise ActionFailed(f"{replica}: no placement record: its unit is not known")
        unit = self.unit(replica)
        changed = self._set_dropin(unit, mode, why)
        if changed or reload:
            self._systemctl("daemon-reload")
        self._systemctl("restart", unit, timeout_s=self.settings.ready_timeout_s)

    def _systemctl(self, *args: str, timeout_s: float = SYSTEMCTL_TIMEOUT_S) -> None:
        done = self._run(["systemctl", *args], timeout_s=timeout_s, cancel=self.cancel)
        if not done.ok:
            how = ("ended: the watcher stopped" if done.cancelled else "timed out"
                   if done.timed_out else f"failed ({done.returncode})")
            raise ActionFailed(f"systemctl {' '.join(args)} {how}: "
                               f"{_tail(done.stderr or done.stdout)}")

    def dropin_path(self, unit: str) -> Path:
        from rocmseat.launch.units import NO_DRAFTER_DROPIN

        return self.settings.unit_dir / f"{unit}.d" / NO_DRAFTER_DROPIN

    def _set_dropin(self, unit: str, mode: str, why: str) -> bool:
        """Write (no-drafter) or remove (drafter) the drop-in; True when it changed."""
        from rocmseat.atomic import atomic_write_text
        from rocmseat.launch.units import no_drafter_dropin
        from rocmseat.safeio import read_regular_text

        path = self.dropin_path(unit)
        if mode == Mode.DRAFTER:
            if not os.path.lexists(path):
                return False
            if path.is_symlink() or not path.is_file():
                raise ActionFailed(f"{path}: not the regular file rocmseat wrote: left alone")
            path.unlink()
            return True
        try:
            text = read_regular_text(self.settings.unit_dir / unit, limit_bytes=UNIT_LIMIT_BYTES)
            dropin = no_drafter_dropin(text, why=why)
        except (RocmseatError, ValueError) as exc:
            raise ActionFailed(f"{self.settings.unit_dir / unit}: cannot run it without its "
                               f"drafter: {exc}") from None
        try:
            path.parent.mkdir(mode=0o755, exist_ok=True)
            if path.parent.is_symlink():
                raise ActionFailed(f"{path.parent}: is a symlink: no drop-in written there")
            atomic_write_text(path, dropin)
        except OSError as exc:
            raise ActionFailed(f"{path}: cannot write the drop-in: {exc.strerror or exc}") \
                from None
        return True
