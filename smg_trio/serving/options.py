"""I/O. The options of `smg-trio serve`: its flags, and how they overlay the TOML file
(`--config`) to make the GatewayConfig (`config.config_from_mapping` checks them all).

A flag given on the command line wins over the file's key of the same name; a flag not given
leaves the file's value, else the default (serving/config.py). Paths given as flags are relative to the
working directory, paths in the file to the file's folder. `--log-level` and `--log-format` are
the process's, not the config's (cli.py). Each group's defaults and reasons are in its doc:
routing and admission in docs/routing.md, HTTP limits in docs/http.md, observability in
docs/observability.md, background responses in docs/client-apis.md §3.5, tenants in
docs/fleet.md §2, processes in docs/processes.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from smg_trio.errors import ConfigError
from smg_trio.neutral.pooling import CONVERTS, RUNNERS
from smg_trio.observability.request_log import LOG_FORMATS
from smg_trio.routing.policies import POLICY_NAMES
from smg_trio.serving.config import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    GatewayConfig,
    config_from_mapping,
    read_config_file,
)
from smg_trio.serving.frontend_option_flags import FRONTEND_OPTION_FLAGS, add_frontend_option_flags
from smg_trio.serving.media_options import MEDIA_FLAGS, add_media_flags

# Flag destinations that map one-to-one onto GatewayConfig fields.
_CONFIG_FLAGS = (
    "host",
    "port",
    "served_model_names",
    "api_key",
    "max_body_bytes",
    "request_timeout_s",
    "engine_silence_s",
    "drain_timeout_s",
    "keepalive_s",
    "policy",
    "session_header",
    "max_retries",
    "migration_limit",
    "max_concurrent_requests",
    "max_queue",
    "queue_timeout_s",
    "admin_api_key",
    "tool_call_parser",
    "reasoning_parser",
    "max_model_len",
    "runner",
    "convert",
    "memory_budget_mb",
    "stream_interval",
    # HTTP limits (add_http_limit_flags)
    "idle_timeout_s",
    "header_timeout_s",
    "body_timeout_s",
    "body_idle_s",
    "max_connections",
    "max_websockets",
    "h2_max_streams",
    "metrics_port",
    "probe_port",
    "log_requests",
    "otlp_endpoint",
    "otlp_traces_endpoint",
    "response_store",
    "response_retention_s",
    "response_events_max",
    "resume_grace_s",
    "processes",
    "state_url",
    *MEDIA_FLAGS,
    *FRONTEND_OPTION_FLAGS,
)
_PATH_FLAGS = ("model_path", "certfile", "keyfile", "api_keys", "chat_template")


def config_from_args(args: argparse.Namespace) -> GatewayConfig:
    """The TOML file (if any) overlaid with the flags given on the command line."""
    data: dict[str, Any] = {}
    base = Path.cwd()
    source = "command line"
    if args.config is not None:
        source = str(args.config)
        base = args.config.parent
        data = read_config_file(args.config)
    for name in _CONFIG_FLAGS:
        value = getattr(args, name)
        if value is not None:
            data[name] = value
    for name in _PATH_FLAGS:
        value = getattr(args, name)
        if value is not None:
            data[name] = value.resolve()  # a Path: flags are relative to the working directory
    if args.workers:
        data["workers"] = list(args.workers)
    if args.models:  # as --worker replaces `workers`, --model replaces the file's [[models]]
        data["models"] = [_model_table(text) for text in args.models]
    if "model_path" not in data and not data.get("models"):
        raise ConfigError(
            "--model-path DIR or --model NAME=DIR (or model_path or [[models]] in the config "
            "file) is required"
        )
    return config_from_mapping(data, source=source, base=base)


def _model_table(text: str) -> dict[str, Any]:
    """`--model NAME=DIR` as the [[models]] table it stands for."""
    name, eq, path = text.partition("=")
    if not eq or not name or not path:
        raise ConfigError(f"--model {text!r}: expected NAME=DIR (a served name and a folder)")
    return {"model_path": Path(path).resolve(), "served_model_names": [name]}


def add_serve_options(serve: argparse.ArgumentParser) -> None:
    """Every flag of `smg-trio serve`, in the order `--help` lists them."""
    serve.add_argument(
        "--model-path", type=Path, metavar="DIR", help="model folder (tokenizer + configs)"
    )
    serve.add_argument(
        "--model",
        dest="models",
        action="append",
        metavar="NAME=DIR",
        help="a further model served as NAME (the first one when there is no --model-path); "
        "its workers name it: --worker 'vllm+zmq://H:P?model=NAME' (docs/fleet.md §4)",
    )
    serve.add_argument(
        "--worker",
        dest="workers",
        action="append",
        metavar="SPEC",
        help="RUNTIME+WIRE://HOST:PORT, e.g. vllm+zmq://127.0.0.1:27937; repeat for several; "
        "?model=NAME: the model it serves (default: the first)",
    )
    serve.add_argument(
        "--config", type=Path, metavar="FILE", help="TOML file with the same settings"
    )
    serve.add_argument("--host", metavar="H", help=f"listen address (default {DEFAULT_HOST})")
    serve.add_argument(
        "--port", type=int, metavar="P", help=f"listen port (default {DEFAULT_PORT})"
    )
    serve.add_argument(
        "--served-model-name",
        dest="served_model_names",
        action="append",
        metavar="NAME",
        help="a model name clients use (repeat for aliases; default: the model folder's name)",
    )
    serve.add_argument(
        "--api-key", metavar="KEY", help="require `Authorization: Bearer KEY` (not on /health)"
    )
    serve.add_argument(
        "--certfile", type=Path, metavar="FILE", help="TLS certificate (PEM); enables TLS + h2"
    )
    serve.add_argument("--keyfile", type=Path, metavar="FILE", help="TLS private key (PEM)")
    serve.add_argument(
        "--request-timeout",
        dest="request_timeout_s",
        type=float,
        metavar="S",
        help="seconds per request",
    )
    serve.add_argument(
        "--max-body-bytes", type=int, metavar="N", help="largest request body accepted"
    )
    for flag, meaning in (  # docs/resilience.md
        ("--engine-silence-s", "engine silence, while a first token is awaited, that is death"),
        ("--drain-timeout-s", "on SIGTERM/SIGINT, how long running streams may finish"),
        ("--keepalive-s", "silence after which a stream gets a keep-alive"),
    ):
        serve.add_argument(flag, type=float, metavar="S", help=meaning)
    add_routing_flags(serve)
    serve.add_argument(
        "--tool-call-parser", metavar="NAME", help="read tool calls in this format (e.g. hermes)"
    )
    serve.add_argument(
        "--reasoning-parser", metavar="NAME", help="separate reasoning (e.g. deepseek_r1, qwen3)"
    )
    serve.add_argument(
        "--chat-template",
        type=Path,
        metavar="FILE",
        help="a Jinja chat template in place of the model folder's (the first model)",
    )
    serve.add_argument(
        "--max-model-len",
        type=int,
        metavar="N",
        help="the model's context length, at most its folder's (the first model)",
    )
    serve.add_argument(
        "--runner",
        choices=RUNNERS,
        help="what the first model is run as, by vLLM's name: generate (default) or pooling "
        "(docs/pooling.md §4)",
    )
    serve.add_argument(
        "--convert",
        choices=CONVERTS,
        help="the pooler of a --runner pooling model, by vLLM's name (default embed)",
    )
    serve.add_argument(
        "--api-keys",
        type=Path,
        metavar="FILE",
        help="TOML file of API keys, each naming a tenant with optional requests/min, "
        "tokens/min and max concurrent (docs/fleet.md §2); replaces --api-key",
    )
    serve.add_argument(
        "--state-url",
        metavar="URL",
        help="redis://HOST:PORT/DB: tenant limits shared by every process and replica "
        "(default: each process its own)",
    )
    serve.add_argument(
        "--response-store",
        metavar="URL",
        help="where /v1/responses keeps responses: sqlite:///PATH (default: a file in the "
        "user's data dir) or postgresql://... (replicas)",
    )
    for flag, meaning in (  # docs/client-apis.md §3.5
        ("--response-retention-s", "how long a finished background response's events are kept"),
        ("--resume-grace-s", "how long a resumable stream nobody follows keeps generating"),
    ):
        serve.add_argument(flag, type=float, metavar="S", help=meaning)
    serve.add_argument(
        "--response-events-max",
        type=int,
        metavar="N",
        help="events of one response the log keeps (the oldest go first)",
    )
    serve.add_argument(
        "--memory-budget-mb",
        type=int,
        metavar="MB",
        help="memory the bodies and prompts of requests in flight may hold; past it, 429 "
        "(default: a quarter of physical memory)",
    )
    serve.add_argument(
        "--stream-interval",
        type=int,
        metavar="K",
        help="streamed tokens per chunk after a choice's first, as vLLM's: the first text and "
        "the finish are never held (default 1)",
    )
    add_http_limit_flags(serve)
    add_media_flags(serve)
    add_frontend_option_flags(serve)
    # Observability (docs/observability.md).
    serve.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    serve.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text lines, or one JSON object per line",
    )
    serve.add_argument(
        "--log-requests",
        action="store_const",
        const=True,
        default=None,
        help="add each request's body and completion text to its log line (off: never logged)",
    )
    serve.add_argument(
        "--metrics-port",
        type=int,
        metavar="P",
        help="also serve GET /metrics on this port (it is always on the main port)",
    )
    serve.add_argument(
        "--probe-port",
        type=int,
        metavar="P",
        help="answer /health, /readiness, /liveness and /metrics on this port from a thread of "
        "their own, however busy the gateway is (docs/resilience.md)",
    )
    serve.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="export OpenTelemetry traces over OTLP/HTTP, e.g. http://127.0.0.1:4318/v1/traces",
    )
    serve.add_argument(
        "--otlp-traces-endpoint",
        metavar="URL",
        help="vLLM's flag: export the traces over OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (grpc, "
        "the default, e.g. 127.0.0.1:4317, or http/protobuf)",
    )
    serve.add_argument(
        "--processes",
        type=int,
        metavar="N",
        help="gateway processes sharing the port, under a supervisor (default 1: no "
        "supervisor; docs/processes.md)",
    )


def add_routing_flags(serve: argparse.ArgumentParser) -> None:
    """Routing, retries, admission and the /workers API (docs/routing.md)."""
    routing = serve.add_argument_group("routing and admission (docs/routing.md)")
    routing.add_argument(
        "--policy",
        choices=POLICY_NAMES,
        help="how a worker is picked (default round_robin; per model: model_policies in TOML)",
    )
    routing.add_argument(
        "--session-header",
        metavar="NAME",
        help="consistent_hash key header (default x-session-id; else the body's `user`)",
    )
    routing.add_argument(
        "--max-retries",
        type=int,
        metavar="N",
        help="other workers tried when one fails before the first byte (default 2)",
    )
    routing.add_argument(
        "--migration-limit",
        type=int,
        metavar="N",
        help="moves of a stream to another worker when its worker fails mid-stream "
        "(default 1; 0: the stream ends with an error event; docs/resilience.md §9)",
    )
    routing.add_argument(
        "--max-concurrent-requests",
        type=int,
        metavar="N",
        help="requests at the engines at once, gateway-wide (default unlimited)",
    )
    routing.add_argument(
        "--max-queue", type=int, metavar="N", help="requests waiting for a slot (default 256)"
    )
    routing.add_argument(
        "--queue-timeout-s",
        type=float,
        metavar="S",
        help="longest wait for a slot before 429 (default 10)",
    )
    routing.add_argument(
        "--admin-api-key",
        metavar="KEY",
        help="enables GET/POST/DELETE /workers for `Authorization: Bearer KEY`",
    )


def add_http_limit_flags(serve: argparse.ArgumentParser) -> None:
    """The HTTP server's timeouts and caps (docs/http.md has the defaults and why)."""
    limits = serve.add_argument_group("HTTP limits")
    for flag, kind, text in (
        ("--idle-timeout-s", float, "idle keep-alive connections close after S (default 75)"),
        ("--header-timeout-s", float, "a request head must arrive within S (default 20)"),
        ("--body-timeout-s", float, "a request body must arrive within S (default 60); else 408"),
        ("--body-idle-s", float, "longest gap between body reads (default 15); else 408"),
        ("--max-connections", int, "open HTTP connections; more get 503 (default: from fd limit)"),
        ("--max-websockets", int, "open WebSockets; more are closed 1013 (default: 90%% of that)"),
        ("--h2-max-streams", int, "concurrent streams per HTTP/2 connection (default 100)"),
    ):
        limits.add_argument(flag, type=kind, metavar="S" if kind is float else "N", help=text)
