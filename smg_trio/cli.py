"""I/O. The `smg-trio` command line: one subcommand per component.

    smg-trio serve --model-path DIR --worker RUNTIME+WIRE://HOST:PORT [--worker ...] [--host H]
        [--port P] [--served-model-name N ...] [--config FILE.toml] [--api-key KEY]
        [--certfile F --keyfile F] [--request-timeout S] [--max-body-bytes N]
        [--log-level L] [--log-format text|json] [--log-requests] [--metrics-port P]
        [--otlp-endpoint URL]
    smg-trio demo [--host H] [--port P] [--once]
    smg-trio engine vllm-zmq|tokenspeed-zmq ...

A configuration problem (a worker spec without a runtime, a missing model folder, a busy port)
exits with status 2 and one line naming it, before anything is started.
"""

from __future__ import annotations

import argparse
import logging
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

# Flag destinations that map one-to-one onto GatewayConfig fields.
_CONFIG_FLAGS = (
    "host",
    "port",
    "served_model_names",
    "api_key",
    "max_body_bytes",
    "request_timeout_s",
    "metrics_port",
    "log_requests",
    "otlp_endpoint",
)
_PATH_FLAGS = ("model_path", "certfile", "keyfile")


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

    from smg_trio.observability.request_log import logging_to_stderr
    from smg_trio.serve import serve_until_signal

    with logging_to_stderr(args.log_level, args.log_format):
        trio.run(serve_until_signal, config)
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    from smg_trio.demo import DemoOptions, main_demo

    _configure_logging("WARNING")
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
        "--otlp-endpoint",
        metavar="URL",
        help="export OpenTelemetry traces over OTLP/HTTP, e.g. http://127.0.0.1:4318/v1/traces",
    )
    serve.set_defaults(command=_run_serve)


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
