"""Who holds a TCP port: the proof that the server we probe, and send the API key to, is our own vLLM.

While vLLM imports (seconds on a GPU box, and again after every engine death) its port is free, and any
local user can bind it. Whatever answers there would get `Authorization: Bearer <key>` and, if it answered
like vLLM, READY. So a probe proves ownership before it sends a byte: the kernel's socket tables
(/proc/net/tcp, /proc/net/tcp6) name the inode of the server's end of our connection, and a process holds
that socket when one of its /proc/PID/fd links reads `socket:[inode]`. The holder must be a process of
our child's tree. A connection the server has not accepted yet has no inode; it waits on one of the
port's listeners, so then every listener that could have taken it must be ours (vLLM 0.7.3–0.24 set
SO_REUSEPORT, so a stranger can listen beside it).
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import ConfigError
from launcher.oneline import one_line

TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
# A box with a busy proxy can have many sockets; the tables are read whole, but never without a bound.
MAX_TABLE_BYTES = 64 * 2**20
LISTEN = 0x0A
# How long a connection may wait in the server's accept queue before the listeners decide for it.
ACCEPT_WAIT_S = 1.0
WILDCARDS = frozenset({"0.0.0.0", "::"})  # noqa: S104 - addresses read from the kernel's table, not bound


@dataclass(frozen=True, slots=True)
class Row:
    """One socket of the kernel's table."""

    local: tuple[str, int]
    remote: tuple[str, int]
    state: int
    inode: int


class NotOurServer(Exception):
    """What answers on the port is not a process of our vLLM: nothing may be sent to it."""

    def __init__(self, port: int, holder: str) -> None:
        super().__init__(f"port {port} is held by {holder}, not by the vLLM this launcher started")
        self.port = port
        self.holder = holder


def _address(text: str) -> str:
    """The kernel's hex address (32-bit words in host order) as ipaddress writes it; v4-mapped as plain v4."""
    raw = bytes.fromhex(text)
    packed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)) if len(raw) == 16 else raw[::-1]
    addr = ipaddress.ip_address(packed)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def _endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.partition(":")
    return _address(host), int(port, 16)


def parse_table(text: str) -> list[Row]:
    """The rows of one /proc/net/tcp{,6} text; a row that does not parse is skipped."""
    rows = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        try:
            rows.append(Row(_endpoint(fields[1]), _endpoint(fields[2]), int(fields[3], 16), int(fields[9])))
        except ValueError:
            continue
    return rows


def _read_table(path: str) -> str:
    try:
        with open(path, "rb") as table:
            return table.read(MAX_TABLE_BYTES).decode("ascii", "replace")
    except OSError:
        return ""  # no IPv6 on this box: that table is simply absent


def sockets(tables: Iterable[str] = TABLES) -> list[Row]:
    return [row for path in tables for row in parse_table(_read_table(path))]


def listeners(port: int, address: str | None = None, rows: list[Row] | None = None) -> list[Row]:
    """The listening sockets on `port` that a connection to `address` can reach (that address or a wildcard);
    every address when none is given."""
    found = sockets() if rows is None else rows
    return [row for row in found if row.state == LISTEN and row.local[1] == port
            and (address is None or row.local[0] in (address, *WILDCARDS))]


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets this process holds open (none when it is gone or not ours to read)."""
    found = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError, ValueError):
                target = str(fd.readlink())
                if target.startswith("socket:["):
                    found.add(int(target[8:-1]))
    return found


def holder_among(inode: int, pids: Iterable[int]) -> int | None:
    return next((pid for pid in pids if inode in socket_inodes(pid)), None)


def describe_holder(inode: int) -> str:
    """Who holds a socket, for an operator: the PID and its command line (one line, no control characters)."""
    pids = sorted(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
    pid = holder_among(inode, pids)
    if pid is None:
        return "a process this user cannot see (another user's, or in another PID namespace)"
    return describe_pid(pid)


def describe_pid(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes()[:4096].split(b"\0")
    except OSError:
        return f"PID {pid}"
    command = one_line(b" ".join(w for w in words if w).decode(errors="replace"), 160)
    return f"PID {pid} ({command})" if command else f"PID {pid}"


def port_holders(port: int) -> list[str]:
    """Who listens on `port`, on any address: for the error that says why the port is not free."""
    return [describe_holder(row.inode) for row in listeners(port)]


def verify_listeners(port: int, address: str, ours: Iterable[int], rows: list[Row] | None = None) -> None:
    """Every listener a connection to address:port can reach is held by one of `ours`; raises NotOurServer."""
    pids = list(ours)
    for row in listeners(port, address, rows):
        if holder_among(row.inode, pids) is None:
            raise NotOurServer(port, describe_holder(row.inode))


def verify_connection(sock: socket.socket, ours: Callable[[], Iterable[int]], *, accept_wait_s: float = ACCEPT_WAIT_S,
                      clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
    """The server end of this connected socket is held by one of `ours()`; raises NotOurServer otherwise.

    Called after connect and before the request (and its key) is sent."""
    client = _normal(sock.getsockname())
    server = _normal(sock.getpeername())
    deadline = clock() + accept_wait_s
    while True:
        rows = sockets()
        end = next((row for row in rows if row.local == server and row.remote == client), None)
        if end is not None and end.inode:
            pids = list(ours())
            if holder_among(end.inode, pids) is None:
                raise NotOurServer(server[1], describe_holder(end.inode))
            return
        if clock() >= deadline:
            # Not accepted yet (or the table does not show it): it waits on one of the port's listeners.
            verify_listeners(server[1], server[0], ours(), rows)
            if end is None and not listeners(server[1], server[0], rows):
                raise NotOurServer(server[1], "no listener the kernel's socket table shows")
            return
        sleep(0.01)


def resolve_host(host: str) -> str:
    """A URL's host as the kernel's table writes it: `localhost` and brackets resolved to an address."""
    bare = host.strip("[]")
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        return socket.gethostbyname(bare) if bare == "localhost" else bare


def _normal(name: tuple[str, int] | tuple[str, int, int, int]) -> tuple[str, int]:
    addr = ipaddress.ip_address(name[0].split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped), int(name[1])
    return str(addr), int(name[1])


def check_port(host: str | None, port: int) -> None:
    """Before every launch: the port is free. vLLM 0.7.3–0.24 set SO_REUSEPORT, so a second server on a busy
    port starts silently; and a port taken while vLLM was down would be probed as if it were ours."""
    address = host or "0.0.0.0"  # noqa: S104 - the address vLLM will bind
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address.strip("[]"), port))
        except OSError as exc:
            holders = "; ".join(port_holders(port)) or "a process this user cannot see"
            raise ConfigError(f"port {port} on {address} is not free ({exc.strerror}; held by {holders}); stop "
                              "what listens there or set vllm.port to a free port") from None
