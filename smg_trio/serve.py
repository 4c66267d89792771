"""I/O. `serve(config)`: the model, one backend per worker, the Gateway, and hypercorn's trio
server on one port, all in the caller's `trio.run`.

    serve ─┬─ load the model folder, check every worker and the listener (ConfigError: nothing ran)
           ├─ open one backend per worker spec (ZMQ: bind the handshake port the engines dial;
           │   gRPC: a channel to the engine, ready once its health check passes)
           └─ hypercorn.trio.serve(GatewayApp): HTTP/1.1 and h2c with prior knowledge on one
              cleartext port, or, with a certificate and key, TLS on that port with ALPN
              offering h2 and http/1.1

- `task_status.started(Serving(...))` reports the bound URLs, the port (port 0 picks one), each
  worker's bound address (a ZMQ worker given port 0 gets one too) and the Gateway.
- Shutdown: when `shutdown_trigger` returns, hypercorn stops accepting, gives in-flight
  requests `GRACEFUL_SHUTDOWN_S`, then cancels them (each cancelled stream aborts its engine
  request); the backends close last, their own aborts bounded by the backend's grace period.
  Without a trigger, `serve` runs until cancelled.
- Every configuration problem is a ConfigError raised before any task or socket is started.
- `/metrics` is served on the main port; with `metrics_port` also on a listener of its own
  (`MetricsApp`, cleartext, same host), which stops when the main server has stopped. Once
  shutdown is triggered the gateway is marked draining, so requests cancelled from then on
  count as drained (docs/observability.md §1).
"""

from __future__ import annotations

import logging
import signal
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Final, assert_never, cast

import hypercorn.config
import hypercorn.trio
import trio
from hypercorn.typing import Framework

from smg_trio.backends.base import Backend
from smg_trio.backends.grpc_backend import open_grpc_backend
from smg_trio.backends.zmq_backend import open_zmq_backend
from smg_trio.config import GatewayConfig, WorkerSpec
from smg_trio.core.finalize import WorkerTarget
from smg_trio.errors import ConfigError
from smg_trio.frontends.asgi import GatewayApp, MetricsApp
from smg_trio.gateway import Gateway
from smg_trio.model import ModelDir, load_model_dir
from smg_trio.neutral.runtime import Wire, require_adapter
from smg_trio.routing.workers import RoundRobin, Worker, WorkerPool

if TYPE_CHECKING:
    from smg_trio.observability.tracing import RequestTracer

GRACEFUL_SHUTDOWN_S: Final = 1.0
"""How long in-flight requests may go on after shutdown is triggered."""
KEEP_ALIVE_S: Final = 20.0
"""Idle keep-alive connections close after this; longer than common client pool expiries (5 s)
so a client never reuses a connection the server is closing."""
LIFESPAN_TIMEOUT_S: Final = 5.0
HTTP_LOGGER: Final = "smg_trio.http"
logger = logging.getLogger(__name__)

ShutdownTrigger = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Serving:
    """What `serve` reports once it listens."""

    urls: tuple[str, ...]  # e.g. ("http://127.0.0.1:8000",) or ("https://...",)
    port: int
    worker_addresses: tuple[str, ...]  # per worker spec, bound (ZMQ: tcp://HOST:PORT to dial)
    gateway: Gateway
    metrics_port: int | None = None  # the metrics-only listener's port, when configured


async def serve(
    config: GatewayConfig,
    *,
    task_status: trio.TaskStatus[Serving] = trio.TASK_STATUS_IGNORED,
    shutdown_trigger: ShutdownTrigger | None = None,
) -> None:
    """Serve `config` until `shutdown_trigger` returns (or until cancelled). See module doc."""
    for spec in config.workers:
        check_worker_available(spec)
    names = config.served_model_names
    model = load_model_dir(config.model_path, served_name=names[0] if names else None)
    http_config = hypercorn_config(config)
    check_listener(config, http_config)
    tracing = tracing_for(config)
    metrics_config = None
    if config.metrics_port is not None:
        metrics_config = hypercorn_config(config, port=config.metrics_port, tls=False)
        check_listener(config, metrics_config, port=config.metrics_port)
    async with AsyncExitStack() as stack:
        tracer = None if tracing is None else stack.enter_context(tracing())
        workers: list[Worker] = []
        addresses: list[str] = []
        for spec in config.workers:
            backend, address = await stack.enter_async_context(open_backend(spec, model))
            target = WorkerTarget(runtime=spec.runtime, wire=spec.wire, eos_ids=model.eos_ids)
            workers.append(Worker(name=str(spec), target=target, backend=backend))
            addresses.append(address)
        pool = WorkerPool(workers, RoundRobin())
        gateway = Gateway(
            model,
            pool,
            request_timeout_s=config.request_timeout_s,
            served_model_names=names or (model.served_name,),
            log_requests=config.log_requests,
            tracer=tracer,
        )
        app = GatewayApp(gateway, api_key=config.api_key, max_body_bytes=config.max_body_bytes)
        async with trio.open_nursery() as nursery:
            metrics_port = None
            if metrics_config is not None:
                metrics_app = cast(Framework, MetricsApp(gateway.metrics))
                metrics_urls: list[str] = await nursery.start(
                    partial(hypercorn.trio.serve, metrics_app, metrics_config)
                )
                metrics_port = int(metrics_urls[0].rsplit(":", 1)[1])
            urls: list[str] = await nursery.start(
                partial(
                    _serve_then_stop_all,
                    cast(
                        Framework, app
                    ),  # our ASGI types are plain dicts; hypercorn's are TypedDicts
                    http_config,
                    None
                    if shutdown_trigger is None
                    else partial(_drain, shutdown_trigger, gateway),
                    nursery.cancel_scope,
                )
            )
            port = int(urls[0].rsplit(":", 1)[1])
            logger.info(
                "serving %s for %s",
                " ".join(urls),
                ", ".join(addresses),
                extra={"urls": urls, "workers": addresses, "metrics_port": metrics_port},
            )
            task_status.started(Serving(tuple(urls), port, tuple(addresses), gateway, metrics_port))


async def _serve_then_stop_all(
    app: Framework,
    http_config: hypercorn.config.Config,
    shutdown_trigger: ShutdownTrigger | None,
    everything: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The main server; once it stopped, the metrics listener beside it stops too."""
    await hypercorn.trio.serve(
        app, http_config, shutdown_trigger=shutdown_trigger, task_status=task_status
    )
    everything.cancel()


async def _drain(shutdown_trigger: ShutdownTrigger, gateway: Gateway) -> None:
    await shutdown_trigger()
    gateway.draining = True
    logger.info("shutting down: %d requests still in flight", _in_flight(gateway))


def _in_flight(gateway: Gateway) -> int:
    return sum(worker.backend.statistics().open_streams for worker in gateway.pool.workers)


async def serve_until_signal(config: GatewayConfig) -> None:
    """`serve` until SIGINT (Ctrl-C) or SIGTERM, then shut down gracefully."""
    with open_shutdown_signal() as shutdown_trigger:
        await serve(config, shutdown_trigger=shutdown_trigger)


@contextmanager
def open_shutdown_signal() -> Iterator[ShutdownTrigger]:
    """A trigger that returns at the first SIGINT or SIGTERM (instead of KeyboardInterrupt)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def first_signal() -> None:
            async for _ in signals:
                return

        yield first_signal


def tracing_for(
    config: GatewayConfig,
) -> Callable[[], AbstractContextManager[RequestTracer]] | None:
    """The OTLP tracing to run with `config` (None: off); a ConfigError when it is asked for
    and the `tracing` extra is not installed (docs/observability.md §4)."""
    endpoint = config.otlp_endpoint
    if endpoint is None:
        return None
    try:
        from smg_trio.observability.tracing import otlp_tracing
    except ImportError as exc:
        raise ConfigError(
            f"--otlp-endpoint needs OpenTelemetry: pip install 'smg-trio[tracing]' ({exc})"
        ) from exc
    return partial(otlp_tracing, endpoint)


def check_worker_available(spec: WorkerSpec) -> None:
    """A worker this build can open; anything else is a ConfigError before startup.

    `parse_worker_spec` already refused pairs without an adapter; this is the last guard before
    a socket is opened, so a spec built by hand cannot slip through.
    """
    require_adapter(spec.runtime, spec.wire)


@asynccontextmanager
async def open_backend(spec: WorkerSpec, model: ModelDir) -> AsyncIterator[tuple[Backend, str]]:
    """The backend of one worker spec and the address it is bound to (ZMQ) or dials (gRPC)."""
    check_worker_available(spec)
    match spec.wire:
        case Wire.ZMQ:
            async with open_zmq_backend(
                runtime=spec.runtime,
                handshake_address=f"tcp://{spec.address}",
                vocab_size=model.tokenizer.vocab_size,
            ) as zmq_backend:
                yield zmq_backend, zmq_backend.handshake_address
        case Wire.GRPC:
            async with open_grpc_backend(
                runtime=spec.runtime, address=spec.address
            ) as grpc_backend:
                yield grpc_backend, f"grpc://{spec.address}"
        case _:
            assert_never(spec.wire)


def hypercorn_config(
    config: GatewayConfig, *, port: int | None = None, tls: bool = True
) -> hypercorn.config.Config:
    """The main listener's settings, or with `port` (and `tls=False`) the metrics listener's."""
    http = hypercorn.config.Config()
    host = f"[{config.host}]" if ":" in config.host else config.host
    http.bind = [f"{host}:{config.port if port is None else port}"]
    if tls and config.certfile is not None and config.keyfile is not None:
        http.certfile = str(config.certfile)
        http.keyfile = str(config.keyfile)
    http.alpn_protocols = ["h2", "http/1.1"]
    http.keep_alive_timeout = KEEP_ALIVE_S
    http.graceful_timeout = GRACEFUL_SHUTDOWN_S
    http.startup_timeout = LIFESPAN_TIMEOUT_S
    http.shutdown_timeout = LIFESPAN_TIMEOUT_S
    http.accesslog = None  # one line per request is noise at token-streaming rates
    http.errorlog = logging.getLogger(HTTP_LOGGER)
    return http


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
    try:
        http.create_ssl_context()
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the TLS certificate or key: {exc}") from exc
