"""The listening sockets of a process tree, read from ``/proc`` (what ``ss -ltnup`` shows, for these pids only):
:func:`listening_sockets` once, :class:`ListeningSampler` over a block (a thread reading them every half second).
"""

from __future__ import annotations

import ipaddress
import os
import threading
from dataclasses import dataclass
from pathlib import Path

_TABLES = {"tcp": 4, "tcp6": 6, "udp": 4, "udp6": 6}
_TCP_LISTEN = "0A"
_UDP_UNCONNECTED = "07"


@dataclass(frozen=True)
class Listener:
    """One listening socket: its process, protocol, address and port."""

    pid: int
    process: str
    proto: str
    address: str
    port: int

    @property
    def loopback(self) -> bool:
        address = ipaddress.ip_address(self.address)
        mapped = getattr(address, "ipv4_mapped", None)
        return (mapped or address).is_loopback

    def __str__(self) -> str:
        return f"{self.process}[{self.pid}] {self.proto} {self.address}:{self.port}"


def process_tree(root: int) -> set[int]:
    """``root`` and every process descended from it (now)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


def _address(hex_address: str, family: int) -> str:
    raw = bytes.fromhex(hex_address)
    # /proc writes each 32-bit word in host (little-endian) order
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words)) if family == 4 else str(ipaddress.IPv6Address(words))


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def listening_sockets(pids: set[int]) -> set[Listener]:
    """Every TCP socket in LISTEN and every unconnected bound UDP socket that one of ``pids`` holds."""
    owner = {inode: pid for pid in pids for inode in _socket_inodes(pid)}
    found = set()
    for proto, family in _TABLES.items():
        try:
            lines = Path(f"/proc/{os.getpid()}/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            wanted = _TCP_LISTEN if proto.startswith("tcp") else _UDP_UNCONNECTED
            if state != wanted or inode not in owner:
                continue
            hex_address, hex_port = local.split(":")
            pid = owner[inode]
            try:
                name = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                name = "?"
            found.add(Listener(pid, name, proto, _address(hex_address, family), int(hex_port, 16)))
    return found


class ListeningSampler:
    """Collects the listening sockets of ``root``'s process tree every ``period_s`` while the block runs."""

    def __init__(self, root: int | None = None, period_s: float = 0.5) -> None:
        self.root = root or os.getpid()
        self.period_s = period_s
        self.seen: set[Listener] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.seen |= listening_sockets(process_tree(self.root))
            if self._stop.wait(self.period_s):
                return

    def __enter__(self) -> ListeningSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def exposed(self) -> list[str]:
        """The sockets seen that listen beyond loopback."""
        return sorted(str(s) for s in self.seen if not s.loopback)

    def processes(self) -> set[str]:
        return {s.process for s in self.seen}
