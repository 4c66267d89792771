"""I/O. `--probe-port`: `/health`, `/readiness`, `/liveness` and `/metrics` answered by a process
of their own, so a probe never waits for the gateway (docs/resilience.md §8).

On the main port a probe is one more task of the gateway's event loop: with 1,000 streams
saturating the loop, `/health` took 0.2–2 s there. A thread of the gateway's process is not
enough either: the cycle collector's full passes hold the GIL for 150–310 ms at that load
(bench/RESULTS.md). So:

    gateway's event loop: publish_forever ── every PUBLISH_PERIOD_S ──▶ pipe
    probe process: a reader thread swaps in each snapshot; http.server answers from the latest

- The loop publishes what the probes report (ready, the reason when not, the metrics
  exposition) as one immutable snapshot through a pipe; the probe process never sees the
  gateway's state itself. An answer is at most `PUBLISH_PERIOD_S` old.
- The probe process has its own interpreter and GIL: nothing the gateway does (streams, GC)
  delays it; it waits only for a core.
- One connection at a time, each bounded by `CONNECTION_S` (the stdlib handler's socket
  timeout): a stuck prober delays other probes by at most that, and holds nothing else.
- Lifetime: `open_probe_server` starts the process (spawned, daemonic), hands it the first
  snapshot and waits for its bound port; leaving the block closes the pipe, which ends the
  process (its reader sees EOF and shuts the server down), waited for within
  `SHUTDOWN_GRACE_S`, then killed. `serve` checks the port first, so a busy one is a
  ConfigError.
"""

from __future__ import annotations

import http.server
import multiprocessing
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Final

import trio

from smg_trio.request.routes import PROBE_ROUTES, RouteKind

PUBLISH_PERIOD_S: Final = 0.5
CONNECTION_S: Final = 1.0
SHUTDOWN_GRACE_S: Final = 2.0
START_S: Final = 30.0  # spawning a Python process: well under a second unless the box is swamped
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
        route = PROBE_ROUTES.get(self.path.split("?", 1)[0])
        kind = None if route is None else route.kind
        if kind is RouteKind.LIVENESS:
            self._answer(200, JSON, b'{"status":"ok"}')
        elif kind is RouteKind.HEALTH:
            if snapshot.ready:
                self._answer(200, JSON, b'{"status":"ok"}')
            else:
                reason = snapshot.unready_reason.replace('"', "'")
                self._answer(503, JSON, b'{"status":"unavailable","reason":"%s"}' % reason.encode())
        elif kind is RouteKind.METRICS:
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


class ProbeProcess:
    """The parent's handle on the probe process: its port, and the pipe to publish through."""

    def __init__(self, port: int, pipe: Connection) -> None:
        self.port = port
        self._pipe = pipe

    async def publish(self, snapshot: ProbeSnapshot) -> None:
        # A pipe write may block when the process is slow to read: off the event loop.
        await trio.to_thread.run_sync(self._pipe.send, snapshot)


@asynccontextmanager
async def open_probe_server(
    host: str, port: int, first: ProbeSnapshot
) -> AsyncIterator[ProbeProcess]:
    """Serve probes on (host, port) from a process of their own until the block ends.

    The caller keeps `publish_forever` running beside the block (in its own nursery) so the
    answers follow the gateway."""
    context = multiprocessing.get_context("spawn")
    pipe, child_end = context.Pipe()
    process = context.Process(
        target=_probe_process_main,
        args=(host, port, child_end),
        name="smg-trio-probes",
        daemon=True,
    )
    process.start()
    child_end.close()
    try:
        pipe.send(first)
        with trio.fail_after(START_S):
            bound = await trio.to_thread.run_sync(pipe.recv, abandon_on_cancel=True)
        yield ProbeProcess(int(bound), pipe)
    finally:
        pipe.close()  # the process's reader sees EOF and shuts its server down
        with trio.move_on_after(SHUTDOWN_GRACE_S, shield=True):
            await trio.to_thread.run_sync(process.join, abandon_on_cancel=True)
        if process.is_alive():
            process.kill()
            process.join()
        process.close()


async def publish_forever(probes: ProbeProcess, take_snapshot: Callable[[], ProbeSnapshot]) -> None:
    """Hand the probe process a fresh snapshot every `PUBLISH_PERIOD_S`, until cancelled."""
    while True:
        await trio.sleep(PUBLISH_PERIOD_S)
        await probes.publish(take_snapshot())


def _probe_process_main(host: str, port: int, pipe: Connection) -> None:
    """The probe process: bind, report the port, answer from the latest snapshot until EOF."""
    server = ProbeServer((host, port), pipe.recv())
    pipe.send(server.server_address[1])

    def follow() -> None:
        try:
            while True:
                server.snapshot = pipe.recv()  # one reference swap: a handler sees old or new
        except (EOFError, OSError):
            server.shutdown()

    threading.Thread(target=follow, name="snapshots", daemon=True).start()
    server.serve_forever()
    server.server_close()
