"""I/O. Loopback addresses for the gateways and engines the tests and the bench start."""

from __future__ import annotations

import socket
from typing import Final

LOOPBACK: Final = "127.0.0.1"


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (the kernel picks it)."""
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port
