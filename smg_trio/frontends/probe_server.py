"""I/O. `--probe-port`: `/health`, `/readiness`, `/liveness` and `/metrics` answered by a thread
of their own, so a probe never queues behind the streams (docs/resilience.md §8).

On the main port a probe is one more task of the gateway's event loop: with 1,000 streams
saturating the loop, `/health` took 0.2–1.8 s there (bench/RESULTS.md). Here:

    event loop: publish_forever ── every PUBLISH_PERIOD_S ──▶ ProbeSnapshot (immutable values)
    probe thread: http.server ── reads the latest snapshot ──▶ the probe's answer

- The loop publishes what the probes report (ready, draining, the metrics exposition) as plain
  immutable values; the thread only reads the last one published, so no state of the event
  loop is ever touched from the thread. An answer is at most `PUBLISH_PERIOD_S` old.
- The thread needs only the GIL, which the loop's thread hands over at least every switch
  interval (5 ms), so a probe is answered in milliseconds however busy the loop is.
- One thread, one connection at a time, each bounded by `CONNECTION_S` (the stdlib handler's
  socket timeout): a stuck prober delays other probes by at most that, and holds nothing else.
- `open_probe_server` binds before its block starts and on exit shuts the thread down, bounded,
  off the event loop; `serve` checks the port first, so a busy one is a ConfigError.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

import trio

PUBLISH_PERIOD_S: Final = 0.5
CONNECTION_S: Final = 1.0
SHUTDOWN_GRACE_S: Final = 2.0
PROBE_READY_PATHS: Final = ("/health", "/readiness")
LIVENESS_PATH: Final = "/liveness"
METRICS_PATH: Final = "/metrics"
JSON: Final = "application/json"


@dataclass(frozen=True)
class ProbeSnapshot:
    """What the probes answer, as the event loop last saw it."""

    ready: bool
    unready_reason: str
    metrics: bytes
    metrics_content_type: str


class _ProbeHandler(http.server.BaseHTTPRequestHandler):
    server: ProbeServer
    timeout = CONNECTION_S  # the stdlib's per-connection socket timeout (see the module doc)
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        snapshot = self.server.snapshot
        path = self.path.split("?", 1)[0]
        if path == LIVENESS_PATH:
            self._answer(200, JSON, b'{"status":"ok"}')
        elif path in PROBE_READY_PATHS:
            if snapshot.ready:
                self._answer(200, JSON, b'{"status":"ok"}')
            else:
                reason = snapshot.unready_reason.replace('"', "'")
                self._answer(503, JSON, b'{"status":"unavailable","reason":"%s"}' % reason.encode())
        elif path == METRICS_PATH:
            self._answer(200, snapshot.metrics_content_type, snapshot.metrics)
        else:
            self._answer(
                404,
                JSON,
                b'{"error":{"message":"this port serves only probes",'
                b'"type":"NotFoundError","param":null,"code":"not_found"}}',
            )

    def do_HEAD(self) -> None:
        self.do_GET()

    def _answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Probes come every few seconds forever: not worth a log line each."""


class ProbeServer(http.server.HTTPServer):
    def __init__(self, address: tuple[str, int], snapshot: ProbeSnapshot) -> None:
        super().__init__(address, _ProbeHandler)
        self.snapshot = snapshot


@asynccontextmanager
async def open_probe_server(
    host: str, port: int, first: ProbeSnapshot
) -> AsyncIterator[ProbeServer]:
    """Serve probes on (host, port) from a thread until the block ends (see the module doc).

    The caller keeps `publish_forever` running beside the block (in its own nursery) so the
    answers follow the gateway."""
    server = ProbeServer((host, port), first)
    thread = threading.Thread(target=server.serve_forever, name="smg-trio-probes", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        with trio.move_on_after(SHUTDOWN_GRACE_S, shield=True):
            await trio.to_thread.run_sync(server.shutdown)
        server.server_close()


async def publish_forever(server: ProbeServer, take_snapshot: Callable[[], ProbeSnapshot]) -> None:
    """Hand the probe thread a fresh snapshot every `PUBLISH_PERIOD_S`, until cancelled."""
    while True:
        await trio.sleep(PUBLISH_PERIOD_S)
        server.snapshot = take_snapshot()  # one reference swap: the thread sees old or new
