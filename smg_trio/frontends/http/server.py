"""I/O. Our accept loop around hypercorn's protocols: connection caps, keep-alive and header
timers that always run, HTTP/2 that refuses streams gracefully (docs/http.md).

    serve_http ─┬─ lifespan (hypercorn's), then listeners (TLS + ALPN h2/http/1.1, or cleartext
                │   HTTP/1.1 with h2c prior knowledge and Upgrade)
                └─ trio.serve_listeners → ConnectionGate.handle, one task per connection:
                     past `max_connections`: `refuse` (503 + close, or GOAWAY for h2)
                     else HttpConnection (hypercorn's TCPServer, our protocols)

It replaces `hypercorn.trio.serve`, which has no connection cap and whose per-connection
bookkeeping (close after `Connection: close`, restart the keep-alive timer) runs inside the
app's final `send`: an app that cancels its own scope when the response ends (ours does, when
the stream's disconnect arrives) cancelled that bookkeeping, so such connections were neither
closed nor timed out. `HttpConnection` runs it shielded, with a bound.

Shutdown mirrors hypercorn's: when `shutdown_trigger` returns, accepting stops, connections get
`graceful_timeout` to finish (new h2 streams are refused, HTTP/1.1 connections close after their
response), then they are cancelled.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final

import hypercorn.config
import trio
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState
from hypercorn.utils import repr_socket_addr

from smg_trio.frontends.http.connection import BOOKKEEPING_S, HttpConnection
from smg_trio.frontends.http.connection_refusal import Stream, refuse
from smg_trio.frontends.http.limits import HttpLimits

logger = logging.getLogger(__name__)

REFUSAL_S: Final = 1.0
"""How long a refused connection may take to send its request head and read the 503."""
REFUSALS_IN_FLIGHT: Final = 64
"""Refusals answered at once; past this a refused socket is closed without an answer."""


async def serve_http(
    app: AppWrapper,
    config: hypercorn.config.Config,
    limits: HttpLimits,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `app` on `config.bind` until `shutdown_trigger` returns (or until cancelled)."""
    lifespan_state: dict[str, object] = {}
    lifespan = Lifespan(app, config, lifespan_state)
    context = WorkerContext(None)
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as connections:
            listeners, urls = _open_listeners(config)
            for url in urls:
                await config.log.info(f"Running on {url} (CTRL + C to quit)")
            gate = ConnectionGate(app, config, context, limits, ConnectionState(lifespan_state))
            try:
                async with trio.open_nursery() as accepting:
                    accepting.start_soon(
                        partial(
                            trio.serve_listeners,
                            gate.handle,
                            listeners,
                            handler_nursery=connections,
                        )
                    )
                    task_status.started(urls)
                    if shutdown_trigger is None:
                        await trio.sleep_forever()
                    await shutdown_trigger()
                    accepting.cancel_scope.cancel()
            finally:
                await context.terminated.set()
                connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()


def _open_listeners(
    config: hypercorn.config.Config,
) -> tuple[list[trio.abc.Listener[Stream]], list[str]]:
    sockets = config.create_sockets()
    listeners: list[trio.abc.Listener[Stream]] = []
    urls: list[str] = []
    ssl_context = config.create_ssl_context()
    for sock in sockets.secure_sockets:
        assert ssl_context is not None  # hypercorn makes secure sockets only with a context
        sock.listen(config.backlog)
        plain = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
        listeners.append(trio.SSLListener(plain, ssl_context, https_compatible=True))
        urls.append(f"https://{repr_socket_addr(sock.family, sock.getsockname())}")
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
        listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
        urls.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
    return listeners, urls


class ConnectionGate:
    """Counts open connections; past the cap a connection is refused (docs/http.md §2)."""

    def __init__(
        self,
        app: AppWrapper,
        config: hypercorn.config.Config,
        context: WorkerContext,
        limits: HttpLimits,
        state: ConnectionState,
    ) -> None:
        self._connection = partial(HttpConnection, app, config, context, state, limits)
        self._config = config
        self._max = limits.resolved().max_connections  # (0 in `limits`: derived)
        self._refusals = trio.Semaphore(REFUSALS_IN_FLIGHT)
        self.open = 0
        self.refused = 0

    async def handle(self, stream: Stream) -> None:
        if self.open >= self._max:
            self.refused += 1
            await self._refuse(stream)
            return
        self.open += 1
        try:
            await self._connection(stream).run()
        except Exception:
            # A bug in one connection's handling must not end the accept loop (and with it
            # every other connection): it is logged, and that connection is gone.
            logger.exception("an HTTP connection failed")
        finally:
            self.open -= 1

    async def _refuse(self, stream: Stream) -> None:
        try:
            self._refusals.acquire_nowait()
        except trio.WouldBlock:
            await stream.aclose()
            return
        try:
            with trio.move_on_after(REFUSAL_S):
                await refuse(stream)
        finally:
            self._refusals.release()
            with trio.CancelScope(shield=True, deadline=trio.current_time() + BOOKKEEPING_S):
                await stream.aclose()
