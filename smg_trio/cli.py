"""I/O. The `smg-trio` command line: one subcommand per component.

    smg-trio serve --model-path DIR --worker RUNTIME+WIRE://HOST:PORT [--worker ...] [--host H]
        [--port P] [--served-model-name N ...] [--config FILE.toml] [--api-key KEY]
        [--certfile F --keyfile F] [--request-timeout S] [--max-body-bytes N]
        [--engine-silence-s S] [--drain-timeout-s S] [--keepalive-s S]
        [--policy P] [--max-retries N] [--migration-limit N] [--max-concurrent-requests N]
        [--max-queue N]
        [--queue-timeout-s S] [--session-header NAME] [--admin-api-key KEY]
        [--tool-call-parser NAME] [--reasoning-parser NAME]
        [--memory-budget-mb MB] [--stream-interval K]
        [--idle-timeout-s S] [--header-timeout-s S] [--body-timeout-s S] [--body-idle-s S]
        [--max-connections N] [--max-websockets N] [--h2-max-streams N]
        [--log-level L] [--log-format text|json] [--log-requests] [--metrics-port P] [--probe-port P]
        [--otlp-endpoint URL] [--response-store sqlite:///PATH|postgresql://...]
        [--response-retention-s S] [--response-events-max N] [--resume-grace-s S]
        [--processes N] [--api-keys FILE.toml] [--state-url redis://HOST:PORT/DB]
    smg-trio demo [--host H] [--port P] [--once]
    smg-trio engine vllm-zmq|tokenspeed-zmq ...

A configuration problem (a worker spec without a runtime, a missing model folder, a busy port)
exits with status 2 and one line naming it, before anything is started.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from smg_trio.config import DEFAULT_HOST, DEFAULT_PORT, GatewayConfig, config_from_mapping
from smg_trio.engines.cli import add_engine_commands
from smg_trio.errors import ConfigError
from smg_trio.model import demo_model_path
from smg_trio.observability.request_log import LOG_FORMATS
from smg_trio.request_ids import RequestIdLogFilter
from smg_trio.routing.policies import POLICY_NAMES

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
    "response_store",
    "response_retention_s",
    "response_events_max",
    "resume_grace_s",
    "processes",
    "state_url",
)
_PATH_FLAGS = ("model_path", "certfile", "keyfile", "api_keys")


def config_from_args(args: argparse.Namespace) -> GatewayConfig:
    """The TOML file (if any) overlaid with the flags given on the command line."""
    data: dict[str, Any] = {}
    base = Path.cwd()
    source = "command line"
    if args.config is not None:
        source = str(args.config)
        base = args.config.parent
        try:
            data = tomllib.loads(args.config.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{args.config}: cannot read it: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{args.config}: invalid TOML: {exc}") from exc
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
    if "model_path" not in data:
        raise ConfigError("--model-path DIR (or model_path in the config file) is required")
    return config_from_mapping(data, source=source, base=base)


def _run_serve(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    import trio  # the server stack is imported only for the commands that run it

    from smg_trio.heap import pin_mmap_threshold
    from smg_trio.observability.request_log import logging_to_stderr
    from smg_trio.serve import serve_until_signal

    _tokenize_on_the_calling_thread()
    if config.processes > 1:
        from smg_trio.supervisor import supervise

        with logging_to_stderr(args.log_level, args.log_format):
            return trio.run(supervise, config, args.log_level, args.log_format)
    pin_mmap_threshold()  # large request buffers go back to the system when freed (heap.py)
    with logging_to_stderr(args.log_level, args.log_format):
        trio.run(serve_until_signal, config)
    return 0


def _tokenize_on_the_calling_thread() -> None:
    """HF tokenizers runs even a batch of one text on its rayon thread pool unless
    `TOKENIZERS_PARALLELISM` says no: the event loop then blocks on a hand-off to a pool thread
    and back for every prompt (45 µs of a cold 0.5 ms encode here, docs/performance.md §3). We
    only ever encode one text at a time, so the pool buys nothing; an operator's own setting
    wins. Set before any tokenizer runs, and inherited by `--processes` children."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _run_demo(args: argparse.Namespace) -> int:
    from smg_trio.demo import DemoOptions, main_demo

    _configure_logging("WARNING")
    _tokenize_on_the_calling_thread()
    return main_demo(
        DemoOptions(model_path=args.model_path, host=args.host, port=args.port, once=args.once)
    )


def _configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    # Every line names the request it was logged for (`-` outside any request).
    handler.addFilter(RequestIdLogFilter())
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s")
    )
    logging.basicConfig(level=level.upper(), handlers=[handler])


def add_serve_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = subparsers.add_parser(
        "serve", help="serve the OpenAI API (HTTP/1.1, HTTP/2, WebSocket) in front of engines"
    )
    serve.add_argument(
        "--model-path", type=Path, metavar="DIR", help="model folder (tokenizer + configs)"
    )
    serve.add_argument(
        "--worker",
        dest="workers",
        action="append",
        metavar="SPEC",
        help="RUNTIME+WIRE://HOST:PORT, e.g. vllm+zmq://127.0.0.1:27937; repeat for several",
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
        "--processes",
        type=int,
        metavar="N",
        help="gateway processes sharing the port, under a supervisor (default 1: no "
        "supervisor; docs/processes.md)",
    )
    serve.set_defaults(command=_run_serve)


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


def add_demo_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser(
        "demo", help="serve the gateway with the embedded reference vLLM engine and show it"
    )
    demo.add_argument("--host", default=DEFAULT_HOST)
    demo.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    demo.add_argument(
        "--once",
        action="store_true",
        help="send the example requests over HTTP, print the answers and exit",
    )
    demo.add_argument(
        "--model-path",
        type=Path,
        default=demo_model_path(),
        help="model folder (tokenizer + configs); default: the shipped demo model",
    )
    demo.set_defaults(command=_run_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="smg-trio", description="a trio streaming gateway in front of LLM inference engines"
    )
    subparsers = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")
    add_serve_command(subparsers)
    add_demo_command(subparsers)
    add_engine_commands(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.command(args)
    except ConfigError as exc:
        print(f"smg-trio: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code
