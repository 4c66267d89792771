"""I/O. The HTTP server's timeouts and caps, and their defaults (docs/http.md §1–§2).

The connection cap's default is derived from the process's file-descriptor limit (read with
`resource.getrlimit`): every HTTP connection and WebSocket holds one descriptor, and the engines'
sockets, the model files and the refusals themselves need a reserve, so a full gateway refuses
with a 503 instead of failing `accept()` with EMFILE (which leaves new clients hanging).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Final

KEEP_ALIVE_S: Final = 75.0
"""An idle keep-alive connection closes after this: longer than common client pool expiries
(httpx 5 s, aiohttp 15 s, Go 90 s is the outlier) so a client rarely reuses a connection the
server is closing, and short enough that idle sockets do not pile up (smg: ~90 s)."""
HEADER_TIMEOUT_S: Final = 20.0
"""From the first byte of an HTTP/1.1 request head to its end (slowloris bound)."""
BODY_TIMEOUT_S: Final = 60.0
"""The whole request body must arrive within this, counted from the end of the head."""
BODY_IDLE_S: Final = 15.0
"""Bytes of a request body must keep arriving: no gap between two reads longer than this."""
RESERVED_FDS: Final = 128
"""Descriptors kept for everything but client sockets (engines, model files, logs, refusals)."""
CONNECTIONS_SHARE: Final = 0.75
"""The share of the remaining descriptors that client connections may hold; the rest lets a
refusal (a 503 answer needs its socket) and bursts of accepted-then-refused sockets through."""

WEBSOCKETS_SHARE: Final = 0.9
"""The share of the connection cap WebSockets may hold: a socket serves many streams and lives
long, so most slots may be WebSockets, but a tenth stays for plain HTTP (health checks, SSE)."""


@dataclass(frozen=True)
class HttpLimits:
    idle_timeout_s: float = KEEP_ALIVE_S
    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    body_idle_s: float = BODY_IDLE_S
    max_connections: int = 0  # 0: derived from the descriptor limit
    max_websockets: int = 0  # 0: WEBSOCKETS_SHARE of the connections

    def resolved(self) -> HttpLimits:
        """These limits with every derived default filled in."""
        connections = self.max_connections or default_max_connections()
        return HttpLimits(
            idle_timeout_s=self.idle_timeout_s,
            header_timeout_s=self.header_timeout_s,
            body_timeout_s=self.body_timeout_s,
            body_idle_s=self.body_idle_s,
            max_connections=connections,
            max_websockets=self.max_websockets or max(1, int(connections * WEBSOCKETS_SHARE)),
        )


def default_max_connections() -> int:
    """Client connections this process can hold and still answer the next one with a 503."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(16, int((soft - RESERVED_FDS) * CONNECTIONS_SHARE))
