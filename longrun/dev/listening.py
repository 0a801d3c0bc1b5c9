"""What a local process listens on, read from /proc: the dev stack tells its workers to
refuse every port of its Temporal server (gRPC, HTTP, and the history, matching, worker
and metrics services the dev server opens on ports of its choosing)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
from pathlib import Path

LISTEN = "0A"  # the TCP state in /proc/net/tcp*


def _listening_sockets() -> dict[int, tuple[str, int]]:
    """Inode of every listening TCP socket of this network namespace → (address, port)."""
    found: dict[int, tuple[str, int]] = {}
    for name, size in (("tcp", 4), ("tcp6", 16)):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] != LISTEN:
                    continue
                raw, port = fields[1].split(":")
                # The kernel prints each 32-bit word of the address in host (little-endian)
                # order.
                words = bytes.fromhex(raw)
                packed = b"".join(words[i : i + 4][::-1] for i in range(0, size, 4))
                address = ipaddress.ip_address(packed)
                found[int(fields[9])] = (str(address), int(port, 16))
    return found


def _socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    with contextlib.suppress(OSError), os.scandir(f"/proc/{pid}/fd") as fds:
        for fd in fds:
            with contextlib.suppress(OSError):
                target = os.readlink(fd.path)
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


def listening(pid: int) -> list[tuple[str, int]]:
    """Where process `pid` listens: (address, port) pairs, sorted."""
    sockets = _listening_sockets()
    return sorted({sockets[inode] for inode in _socket_inodes(pid) if inode in sockets})


def owner_of(port: int) -> int | None:
    """The process listening on TCP `port`, if this process may see it."""
    inodes = {inode for inode, (_, p) in _listening_sockets().items() if p == port}
    if not inodes:
        return None
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit() and _socket_inodes(int(entry.name)) & inodes:
                return int(entry.name)
    return None


def as_entries(endpoints: list[tuple[str, int]]) -> list[str]:
    """`host:port` entries ([v6]:port) of `endpoints`."""
    return [f"[{a}]:{p}" if ":" in a else f"{a}:{p}" for a, p in endpoints]
