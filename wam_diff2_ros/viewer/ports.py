"""Waiting for a server's listening port to be free again."""

from __future__ import annotations

import socket
import time

PORT_RELEASE_TIMEOUT_S = 2.0


def wait_until_released(host: str, port: int, timeout_s: float = PORT_RELEASE_TIMEOUT_S) -> bool:
    """Block until nothing listens on ``host:port`` any more (True) or ``timeout_s`` passes (False).

    Probes by binding the address (with ``SO_REUSEADDR``, so connections in TIME_WAIT do not count), never by
    connecting to the server. foxglove's ``stop()`` returns before its listener is closed; after this the port
    can be served again at once."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    deadline = time.monotonic() + timeout_s
    while True:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
                return True
            except OSError:
                pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
