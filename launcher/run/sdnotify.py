"""systemd's notify protocol in pure Python: silent without $NOTIFY_SOCKET, never raises.

One datagram per call, newline-separated KEY=VALUE pairs (sd_notify(3)); a
leading `@` names an abstract socket. Modelled on systemd's
notify-selfcontained-example.py and gunicorn's systemd.sd_notify.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping

import structlog

from launcher.oneline import one_line

log = structlog.get_logger("vllm_launch.sdnotify")


def notify(fields: Mapping[str, str | int], environ: Mapping[str, str] | None = None) -> bool:
    """Send `fields` to systemd; True if a datagram went out."""
    environ = os.environ if environ is None else environ
    address = environ.get("NOTIFY_SOCKET")
    if not address or not fields:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    elif not address.startswith("/"):
        log.debug("sdnotify.unsupported_socket", address=address)  # e.g. vsock: in VMs
        return False
    # A newline in a value would start a field of its own (a READY=1 in an error that quotes a stranger).
    payload = "\n".join(f"{key}={one_line(value, 0)}" for key, value in fields.items()).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(payload)
    except OSError as exc:
        log.debug("sdnotify.failed", error=str(exc))
        return False
    return True


def watchdog_interval(environ: Mapping[str, str] | None = None) -> float | None:
    """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), when systemd watches us."""
    environ = os.environ if environ is None else environ
    usec = environ.get("WATCHDOG_USEC")
    pid = environ.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2_000_000


class Notifier:
    """The run's line to systemd: notifications, and WATCHDOG=1 at half systemd's interval, however often the
    run's waits ask (`ping_watchdog` is called from every wait, so it keeps its own clock)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.last_watchdog = 0.0

    def notify(self, **fields: str | int) -> None:
        notify(fields, self.environ)

    def ping_watchdog(self) -> None:
        interval = watchdog_interval(self.environ)
        now = time.monotonic()
        if interval and now - self.last_watchdog >= interval:
            self.last_watchdog = now
            self.notify(WATCHDOG=1)
