"""I/O. `serve(config)`: the model, one backend per worker, the Gateway, and hypercorn's trio
server on one port, all in the caller's `trio.run`.

    serve ─┬─ load the model folder, check every worker and the listener (serving/http_listener.py);
           │   a problem is a ConfigError and nothing ran
           ├─ open one backend per worker spec (serving/worker_backends.py; ZMQ: bind the handshake port
           │   the engines dial; gRPC: a channel to the engine, ready once its health check
           │   passes), each held by a task of `worker_lifetimes` so /workers can add and remove
           │   workers later
           └─ frontends.http.server.serve_http(GatewayApp): our accept loop over hypercorn's
              protocols; HTTP/1.1 and h2c (prior knowledge or Upgrade) on one cleartext port,
              or, with a certificate and key, TLS on that port with ALPN offering h2 and
              http/1.1; connection caps, keep-alive, header and body timers (docs/http.md)

- `task_status.started(Serving(...))` reports the bound URLs, the port (port 0 picks one), each
  worker's bound address (a ZMQ worker given port 0 gets one too) and the Gateway.
- Shutdown: when `shutdown_trigger` returns, the gateway drains (request/live_requests.py,
  docs/resilience.md §4): new requests get 503 and running ones may finish for
  `drain_timeout_s` (a second signal, `hurry_trigger`, ends the wait at once), then end with a
  `draining` error event and their engine requests aborted; then the server stops accepting,
  gives what is left `GRACEFUL_SHUTDOWN_S` (serving/http_listener.py; the last frames flush) and
  cancels it; the backends close last. Without a trigger, `serve` runs until cancelled.
- One keep-alive task per process writes to streams silent for `keepalive_s` (request/live_requests.py).
- Every configuration problem is a ConfigError raised before any task or socket is started.
- `/metrics` is served on the main port; with `metrics_port` also on a listener of its own
  (`MetricsApp`, cleartext, same host), which stops when the main server has stopped. Once
  shutdown is triggered the gateway is marked draining, so requests cancelled from then on
  count as drained (docs/observability.md §1).
- With `probe_port`, a process of its own answers the probes and `/metrics` from a snapshot the
  event loop publishes twice a second (frontends/http/probe_server.py, docs/resilience.md §8).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import random
import signal
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractContextManager, AsyncExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Final, cast

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.typing import ASGIFramework

from smg_trio.errors import ConfigError
from smg_trio.frontends.asgi import GatewayApp
from smg_trio.frontends.cors import CorsApp
from smg_trio.frontends.http.asgi_types import AsgiApp
from smg_trio.frontends.http.probe_server import ProbeSnapshot, open_probe_server, publish_forever
from smg_trio.frontends.http.server import serve_http
from smg_trio.frontends.metrics_app import MetricsApp
from smg_trio.frontends.root_path import RootPathApp, checked_root_path
from smg_trio.model.pooler_facts import load_model_pooler
from smg_trio.model.tokenizer_info import tokenizer_info_body
from smg_trio.observability.kv_index_metrics import KvIndexFamilies
from smg_trio.observability.metrics import EXPOSITION_CONTENT_TYPE, GatewayMetrics
from smg_trio.observability.process_metrics import mirror_worker_state_forever
from smg_trio.observability.tenant_metrics import TenantMetrics
from smg_trio.observability.vllm_load_metrics import VllmLoadFamilies
from smg_trio.observability.worker_collector import WorkerStateSource
from smg_trio.request.gateway import Gateway
from smg_trio.request.images import open_image_workers
from smg_trio.request.memory_budget import memory_budget
from smg_trio.request.served_model import served_model
from smg_trio.responses.store.stores import default_store_url, open_response_store
from smg_trio.routing.admission import Admission
from smg_trio.routing.kv_index import KvIndex
from smg_trio.routing.policies import build_policy
from smg_trio.routing.workers import Worker, WorkerPool
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.frontend_option_flags import frontend_options
from smg_trio.serving.http_listener import check_listener, check_tls, http_limits, hypercorn_config
from smg_trio.serving.media_options import image_limits
from smg_trio.serving.model_folders import load_model_folders
from smg_trio.serving.process_role import InheritedSockets, ProcessRole
from smg_trio.serving.worker_backends import check_worker_available, open_backend
from smg_trio.serving.worker_lifetimes import RuntimeWorkers, open_worker_lifetimes
from smg_trio.tenancy.api_keys import load_api_keys
from smg_trio.tenancy.gate import open_tenant_gate

if TYPE_CHECKING:
    from smg_trio.observability.tracing import RequestTracer

logger = logging.getLogger(__name__)
# vLLM reads the OTLP protocol of --otlp-traces-endpoint from here (OpenTelemetry's variable).
OTLP_PROTOCOL_VARIABLE: Final = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
OTLP_GRPC_EXPORTER: Final = "opentelemetry.exporter.otlp.proto.grpc"

ShutdownTrigger = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Serving:
    """What `serve` reports once it listens."""

    urls: tuple[str, ...]  # e.g. ("http://127.0.0.1:8000",) or ("https://...",)
    port: int
    worker_addresses: tuple[str, ...]  # per worker spec, bound (ZMQ: tcp://HOST:PORT to dial)
    gateway: Gateway
    metrics_port: int | None = None  # the metrics-only listener's port, when configured
    probe_port: int | None = None  # the probe process's port, when configured


async def serve(
    config: GatewayConfig,
    *,
    task_status: trio.TaskStatus[Serving] = trio.TASK_STATUS_IGNORED,
    shutdown_trigger: ShutdownTrigger | None = None,
    hurry_trigger: ShutdownTrigger | None = None,
    role: ProcessRole | None = None,
    inherited: InheritedSockets | None = None,
) -> None:
    """Serve `config` until `shutdown_trigger` returns (or until cancelled), then drain; if
    `hurry_trigger` returns during the drain, end it at once. With `role`, as one of several
    processes (serving/gateway_process.py, docs/processes.md); with `inherited`, on sockets
    `vllm serve` bound (serving/vllm_frontend.py). See module doc."""
    for spec in config.workers:
        check_worker_available(spec)
    folders = load_model_folders(config.model_specs)  # every served model (docs/fleet.md §4)
    model = folders.folders[0]
    http_fd = role.http_fd if role is not None else None
    if inherited is not None:
        http_fd = inherited.http_fd
    http_config = hypercorn_config(config, fd=http_fd)
    if http_fd is None:  # else the supervisor or vLLM bound the port
        check_listener(config, http_config)
    elif inherited is not None:
        check_tls(http_config)
    tracing = tracing_for(config)
    metrics_config = None
    if config.metrics_port is not None:
        metrics_fd = None if role is None else role.metrics_fd
        metrics_config = hypercorn_config(
            config, port=config.metrics_port, tls=False, fd=metrics_fd
        )
        if role is None:
            check_listener(config, metrics_config, port=config.metrics_port)
    if config.probe_port is not None:
        probe_config = hypercorn_config(config, port=config.probe_port, tls=False)
        check_listener(config, probe_config, port=config.probe_port)
    async with AsyncExitStack() as stack:
        tracer = None if tracing is None else stack.enter_context(tracing())
        clients = {} if role is None else role.zmq_clients()
        opener = partial(
            open_backend,
            engine_silence_s=config.engine_silence_s,
            clients=clients,
            adopted=None if inherited is None else inherited.engines,
        )
        kv_index = kv_index_for(config)
        lifetimes = await stack.enter_async_context(
            open_worker_lifetimes(folders, opener, kv_index)
        )
        opened = [await lifetimes.open_worker(spec) for spec in config.workers]
        addresses = [address for _, address in opened]
        pool = routing_pool(config, [worker for worker, _ in opened], kv_index)
        store_url = config.response_store or default_store_url()
        response_store = await stack.enter_async_context(open_response_store(store_url))
        sources: list[WorkerStateSource] = [VllmLoadFamilies()]
        if kv_index is not None:
            sources.append(KvIndexFamilies(kv_index))
        metrics = GatewayMetrics(pool, extra_sources=sources)
        if role is not None:  # every process's figures (docs/observability.md §6)
            metrics.multiprocess_dir = str(role.metrics_dir)
        tenants = None if config.api_keys is None else load_api_keys(config.api_keys)
        tenant_gate = await stack.enter_async_context(
            open_tenant_gate(
                TenantMetrics(metrics.registry),
                config.state_url,
                request_timeout_s=config.request_timeout_s,
                queue_timeout_s=config.queue_timeout_s,
            )
        )
        # Image processing in worker processes at low priority (docs/images.md §3).
        image_workers = await stack.enter_async_context(open_image_workers())
        gateway = Gateway(
            model,
            pool,
            request_timeout_s=config.request_timeout_s,
            served_model_names=config.served_model_names or (model.served_name,),
            admission=Admission(
                config.max_concurrent_requests,
                max_queue=config.max_queue,
                queue_timeout_s=config.queue_timeout_s,
            ),
            max_retries=config.max_retries,
            migration_limit=config.migration_limit,
            tool_call_parser=config.tool_call_parser,
            reasoning_parser=config.reasoning_parser,
            memory_budget=memory_budget(config.memory_budget_mb),
            log_requests=config.log_requests,
            max_log_len=config.max_log_len,
            frontend=frontend_options(config),
            tracer=tracer,
            response_store=response_store,
            metrics=metrics,
            stream_interval=config.stream_interval,
            tenant_gate=tenant_gate,
            response_retention_s=config.response_retention_s,
            response_events_max=config.response_events_max,
            resume_grace_s=config.resume_grace_s,
            pooler=load_model_pooler(config.model_path, config.model_specs[0].tasks),
            more_models=[
                served_model(
                    folder,
                    spec.names,
                    tool_call_parser=spec.tool_call_parser,
                    reasoning_parser=spec.reasoning_parser,
                    stream_interval=config.stream_interval,
                    pooler=load_model_pooler(spec.model_path, spec.tasks),
                    frontend=frontend_options(config),
                )
                for spec, folder in zip(config.models, folders.folders[1:], strict=True)
            ],
            image_limits=image_limits(config),
            image_workers=image_workers,
            mm_device_do_normalize=config.mm_device_do_normalize,
        )
        limits = http_limits(config)
        app = GatewayApp(
            gateway,
            api_key=config.api_key,
            max_body_bytes=config.max_body_bytes,
            session_header=config.session_header,
            admin=None if config.admin_api_key is None else RuntimeWorkers(pool, lifetimes),
            admin_api_key=config.admin_api_key,
            limits=limits,
            tenants=tenants,
            tokenizer_info=tokenizer_info_body(model) if config.tokenizer_info_endpoint else None,
            scale_out=config.scale_out,
            dev_mode=config.dev_mode,
        )
        # Our ASGI types are plain dicts; hypercorn's are TypedDicts.
        wrapped = ASGIWrapper(cast(ASGIFramework, http_front(app, config)))
        probes = None
        if config.probe_port is not None:
            probes = await stack.enter_async_context(
                open_probe_server(config.host, config.probe_port, probe_snapshot(gateway))
            )

        async def drain_on_shutdown() -> None:
            if shutdown_trigger is None:
                await trio.sleep_forever()
            else:
                await shutdown_trigger()
            logger.info("shutting down: %d requests still in flight", _in_flight(gateway))
            await gateway.live_requests.drain(config.drain_timeout_s, hurry=hurry_trigger)

        async def serve_then_stop(task_status: trio.TaskStatus[list[str]]) -> None:
            await serve_http(
                wrapped,
                http_config,
                limits,
                shutdown_trigger=drain_on_shutdown,
                task_status=task_status,
            )
            # The keep-alive task and the metrics listener have nothing left to serve.
            nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            # The nursery of responses that outlive their connection (docs/client-apis.md
            # §3.4): the drain waits for them as for any request; cancelled after it.
            await nursery.start(gateway.runs.serve)
            nursery.start_soon(gateway.live_requests.keep_alive_forever, config.keepalive_s)
            if metrics.multiprocess_dir is not None and metrics.worker_state is not None:
                nursery.start_soon(mirror_worker_state_forever, metrics.worker_state)
            if probes is not None:
                nursery.start_soon(publish_forever, probes, partial(probe_snapshot, gateway))
            metrics_port = None
            if metrics_config is not None:
                metrics_app = ASGIWrapper(cast(ASGIFramework, MetricsApp(gateway.metrics)))
                metrics_urls: list[str] = await nursery.start(
                    partial(serve_http, metrics_app, metrics_config, limits)
                )
                metrics_port = int(metrics_urls[0].rsplit(":", 1)[1])
            urls: list[str] = await nursery.start(serve_then_stop)
            port = _port_of(urls[0])
            logger.info(
                "serving %s for %s",
                " ".join(urls),
                ", ".join(addresses),
                extra={"urls": urls, "workers": addresses, "metrics_port": metrics_port},
            )
            probe_port = None if probes is None else probes.port
            task_status.started(
                Serving(tuple(urls), port, tuple(addresses), gateway, metrics_port, probe_port)
            )


def _port_of(url: str) -> int:
    """The TCP port of a listener's URL; 0 for a Unix socket (`http://unix:/path`)."""
    port = url.rsplit(":", 1)[1]
    return int(port) if port.isdigit() else 0


def probe_snapshot(gateway: Gateway) -> ProbeSnapshot:
    """What the probe process answers until the next one (frontends/http/probe_server.py)."""
    return ProbeSnapshot(
        ready=gateway.ready,
        unready_reason=gateway.unready_reason(),
        metrics=gateway.metrics.exposition(),
        metrics_content_type=EXPOSITION_CONTENT_TYPE.decode("ascii"),
    )


def _in_flight(gateway: Gateway) -> int:
    return sum(worker.backend.statistics().open_streams for worker in gateway.pool.workers)


def kv_index_for(config: GatewayConfig) -> KvIndex | None:
    """The process's one KV index when a policy reads it (docs/routing.md §9), else None: no
    worker's KV events are subscribed to."""
    policies = (
        config.policy,
        *config.model_policies.values(),
        *(spec.policy for spec in config.models),
    )
    return KvIndex() if "kv_events" in policies else None


def routing_pool(
    config: GatewayConfig, workers: list[Worker], kv_index: KvIndex | None = None
) -> WorkerPool:
    """The pool with the configured policy (the first model's), one per further model (its
    own `policy`, else the configured one, a fresh instance: a model's routing state is its
    own), and one per served name that has its own in `model_policies`."""
    rng = random.Random()
    policies = {
        name: build_policy(policy, rng, kv_index) for name, policy in config.model_policies.items()
    }
    for spec in config.models:
        own = build_policy(spec.policy or config.policy, rng, kv_index)
        for name in spec.names:
            policies.setdefault(name, own)
    return WorkerPool(workers, build_policy(config.policy, rng, kv_index), model_policies=policies)


async def serve_until_signal(config: GatewayConfig) -> None:
    """`serve` until SIGINT (Ctrl-C) or SIGTERM, then drain; a second signal ends the drain."""
    with open_shutdown_signal() as next_signal:
        await serve(config, shutdown_trigger=next_signal, hurry_trigger=next_signal)


@contextmanager
def open_shutdown_signal() -> Iterator[ShutdownTrigger]:
    """A trigger that returns at the next SIGINT or SIGTERM (instead of KeyboardInterrupt):
    the first call at the first signal, a second call at the second."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def first_signal() -> None:
            async for _ in signals:
                return

        yield first_signal


def tracing_for(
    config: GatewayConfig, environ: Mapping[str, str] = os.environ
) -> Callable[[], AbstractContextManager[RequestTracer]] | None:
    """The OTLP tracing to run with `config` (None: off): `--otlp-endpoint` over OTLP/HTTP, or
    vLLM's `--otlp-traces-endpoint` over the protocol `environ` names as vLLM reads it
    (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, default grpc). A ConfigError when it is asked for and
    the `tracing` extra is not installed, or for a protocol vLLM refuses too
    (docs/observability.md §4)."""
    endpoint, protocol, flag = config.otlp_endpoint, "http/protobuf", "--otlp-endpoint"
    if config.otlp_traces_endpoint is not None:
        endpoint, flag = config.otlp_traces_endpoint, "--otlp-traces-endpoint"
        protocol = environ.get(OTLP_PROTOCOL_VARIABLE, "grpc")
        if protocol not in ("grpc", "http/protobuf"):
            raise ConfigError(
                f"{OTLP_PROTOCOL_VARIABLE}={protocol!r}: --otlp-traces-endpoint exports over "
                "grpc or http/protobuf, as vLLM's"
            )
    if endpoint is None:
        return None
    try:
        from smg_trio.observability.tracing import otlp_tracing
    except ImportError as exc:
        raise ConfigError(
            f"{flag} needs OpenTelemetry: pip install 'smg-trio[tracing]' ({exc})"
        ) from exc
    if protocol == "grpc" and importlib.util.find_spec(OTLP_GRPC_EXPORTER) is None:
        raise ConfigError(
            f"{flag} over OTLP/gRPC needs its exporter: pip install 'smg-trio[tracing]'"
        )
    return partial(otlp_tracing, endpoint, protocol)


def http_front(app: AsgiApp, config: GatewayConfig) -> AsgiApp:
    """`app` behind the CORS rules and under the path prefix the config asks for."""
    if config.cors is not None and config.cors.allowed_origins:
        app = CorsApp(app, config.cors)
    if config.root_path:
        app = RootPathApp(app, checked_root_path(config.root_path))
    return app
