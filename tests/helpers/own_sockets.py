"""This process's own TCP connections to a server port, so a fault test kills only the
connections it opened and never another client of a shared server (Linux: /proc)."""

from __future__ import annotations

import os
import re

_SOCKET = re.compile(r"socket:\[(\d+)\]")


def _inodes() -> set[str]:
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            match = _SOCKET.fullmatch(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # closed meanwhile
            continue
        if match:
            found.add(match.group(1))
    return found


def local_ports(server_port: int) -> set[int]:
    """The local ports of this process's TCP connections to ``server_port`` (any address)."""
    mine = _inodes()
    ports = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines)  # the header
                for line in lines:
                    cols = line.split()
                    local, remote, inode = cols[1], cols[2], cols[9]
                    if inode in mine and int(remote.rsplit(":", 1)[1], 16) == server_port:
                        ports.add(int(local.rsplit(":", 1)[1], 16))
        except FileNotFoundError:  # no IPv6 here
            continue
    return ports


def port_of(address: str) -> int:
    """The port of a server's view of a client address: ``127.0.0.1:54321``, ``[::1]:54321``."""
    return int(address.rsplit(":", 1)[1])
