"""I/O. The HTTP listeners' settings, read from the config, and their check before startup.

`hypercorn_config` is what `frontends.http.server.serve_http` listens with: the main listener
(cleartext, or TLS with ALPN offering h2 and http/1.1 when a certificate and key are given),
the metrics listener (`--metrics-port`, cleartext) or, under the supervisor, an inherited
listening socket (docs/processes.md §2). `http_limits` is the connection caps and timers
(docs/http.md). `check_listener` binds the address once and loads the TLS files, so a busy
port or a bad certificate is a ConfigError before any backend or engine starts.
"""

from __future__ import annotations

import logging
import socket
import ssl
from typing import Final

import hypercorn.config

from smg_trio.errors import ConfigError
from smg_trio.frontends.http.limits import HttpLimits
from smg_trio.serving.config import GatewayConfig

GRACEFUL_SHUTDOWN_S: Final = 5.0
"""After the drain (request/live_requests.py): how long the server lets connections flush before cancelling.
An idle connection closes at once; one still sending its streams' last frames to a client that
reads slowly gets this long, so its terminal frames arrive (docs/resilience.md §4: at 1 s, a
slow reader's queued `draining` events and `done` frames were cut off with the connection)."""
UNLIMITED_REQUESTS: Final = 2**62
"""Requests per connection: unlimited. hypercorn's default (1,000) ends an h2 connection with a
GOAWAY whose in-flight streams then hang (docs/http.md §3)."""
LIFESPAN_TIMEOUT_S: Final = 5.0
LISTEN_BACKLOG: Final = 2048  # as the supervisor's listener (serving/supervisor.py)
"""Connections the kernel queues for accept (it caps this at `net.core.somaxconn`). hypercorn's
default, 100, overflowed when 1,000 clients connected at once to a busy loop: the kernel
dropped their handshakes' last ACK and some came back as resets (issue 33's HTTP/1.1 load)."""
HTTP_LOGGER: Final = "smg_trio.http"


def hypercorn_config(
    config: GatewayConfig, *, port: int | None = None, tls: bool = True, fd: int | None = None
) -> hypercorn.config.Config:
    """The main listener's settings, or with `port` (and `tls=False`) the metrics listener's;
    with `fd`, on that inherited listening socket instead of binding (docs/processes.md §2)."""
    http = hypercorn.config.Config()
    host = f"[{config.host}]" if ":" in config.host else config.host
    http.bind = [f"{host}:{config.port if port is None else port}" if fd is None else f"fd://{fd}"]
    if tls and config.certfile is not None and config.keyfile is not None:
        http.certfile = str(config.certfile)
        http.keyfile = str(config.keyfile)
    http.alpn_protocols = ["h2", "http/1.1"]
    http.keep_alive_timeout = config.idle_timeout_s
    http.keep_alive_max_requests = UNLIMITED_REQUESTS
    http.h2_max_concurrent_streams = config.h2_max_streams
    http.graceful_timeout = GRACEFUL_SHUTDOWN_S
    http.backlog = LISTEN_BACKLOG
    http.startup_timeout = LIFESPAN_TIMEOUT_S
    http.shutdown_timeout = LIFESPAN_TIMEOUT_S
    http.accesslog = None  # one line per request is noise at token-streaming rates
    http.errorlog = logging.getLogger(HTTP_LOGGER)
    return http


def http_limits(config: GatewayConfig) -> HttpLimits:
    return HttpLimits(
        idle_timeout_s=config.idle_timeout_s,
        header_timeout_s=config.header_timeout_s,
        body_timeout_s=config.body_timeout_s,
        body_idle_s=config.body_idle_s,
        max_connections=config.max_connections,
        max_websockets=config.max_websockets,
    ).resolved()


def check_listener(
    config: GatewayConfig, http: hypercorn.config.Config, *, port: int | None = None
) -> None:
    """Bind (and release) the listening address and load the TLS files, so a busy port or a
    bad certificate is a ConfigError before any backend or engine is started."""
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as hypercorn binds
        try:
            probe.bind((config.host, config.port if port is None else port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {http.bind[0]}: {exc.strerror or exc}") from exc
    check_tls(http)


def check_tls(http: hypercorn.config.Config) -> None:
    """Load the TLS files (if any), so a bad certificate is a ConfigError before startup."""
    try:
        http.create_ssl_context()
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the TLS certificate or key: {exc}") from exc
