"""The systemd notify protocol: READY=1, STATUS=..., STOPPING=1 over $NOTIFY_SOCKET.

sd_notify(3): the socket is an AF_UNIX datagram socket; a name starting with '@' is in the
abstract namespace (the '@' becomes a NUL byte). Without NOTIFY_SOCKET (not under systemd, or
Type= is not notify) every call is a no-op. The unit uses NotifyAccess=main: rocmseat is the
main process and the only one that may say READY; the engine's environment has NOTIFY_SOCKET
removed so nothing inside it can report readiness early.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Mapping

NOTIFY_ENV = "NOTIFY_SOCKET"


def socket_address(value: str) -> str:
    if value.startswith("@"):
        return "\0" + value[1:]
    return value


class Notifier:
    def __init__(self, address: str | None,
                 listener: Callable[[str], None] | None = None) -> None:
        self.address = address
        self.sent: list[str] = []  # what was sent, for the startup report and tests
        # Also told every message (a terminal's progress display until READY: the CLI's).
        self.listener = listener

    @classmethod
    def from_environ(cls, environ: Mapping[str, str],
                     listener: Callable[[str], None] | None = None) -> Notifier:
        return cls(environ.get(NOTIFY_ENV) or None, listener)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *fields: str) -> bool:
        """Send one datagram; False when there is no socket or it cannot be reached.

        A notify failure must not kill a serving replica: systemd then times the start out
        and says so in the journal, which is the right outcome.
        """
        message = "\n".join(f.replace("\n", " ") for f in fields)
        self.sent.append(message)
        if self.listener is not None:
            self.listener(message)
        if self.address is None:
            return False
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(socket_address(self.address))
            s.sendall(message.encode("utf-8"))
            return True
        return False

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={text}")

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", f"STATUS={status}")

    def stopping(self, status: str) -> bool:
        return self.notify("STOPPING=1", f"STATUS={status}")
