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
    smg-trio frontend --listen-fd N --input-listener-fd X --output-listener-fd Y
        --engine-start-index 0 --engine-count C --data-parallel-size C --args-json JSON
        (run by `vllm serve` as its front end: serving/vllm_frontend.py)

`serve`'s flags, and how they overlay its TOML file into the GatewayConfig, are in
serving/options.py; this module runs the commands. A configuration problem (a worker spec without
a runtime, a missing model folder, a busy port) exits with status 2 and one line naming it,
before anything is started.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from smg_trio.engines.cli import add_engine_commands
from smg_trio.errors import ConfigError
from smg_trio.model.folder import demo_model_path
from smg_trio.observability.request_ids import RequestIdLogFilter
from smg_trio.serving.config import DEFAULT_HOST, DEFAULT_PORT
from smg_trio.serving.options import add_serve_options, config_from_args


def _run_serve(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    import trio  # the server stack is imported only for the commands that run it

    from smg_trio.observability.request_log import logging_to_stderr
    from smg_trio.request.heap import pin_mmap_threshold
    from smg_trio.serving.serve import serve_until_signal

    _tokenize_on_the_calling_thread()
    if config.processes > 1:
        from smg_trio.serving.supervisor import supervise

        with logging_to_stderr(args.log_level, args.log_format):
            return trio.run(supervise, config, args.log_level, args.log_format)
    pin_mmap_threshold()  # large request buffers go back to the system when freed (request/heap.py)
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
    from smg_trio.serving.demo import DemoOptions, main_demo

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
    add_serve_options(serve)  # serving/options.py
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


def _run_frontend(args: argparse.Namespace) -> int:
    from smg_trio.serving.vllm_frontend import main_frontend

    _tokenize_on_the_calling_thread()
    return main_frontend(args)


def add_frontend_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from smg_trio.serving.vllm_frontend import add_frontend_options

    frontend = subparsers.add_parser(
        "frontend",
        help="serve as `vllm serve`'s front end (VLLM_USE_RUST_FRONTEND=1 "
        "VLLM_RUST_FRONTEND_PATH=smg-trio; docs/vllm-frontend.md): vLLM runs this command",
    )
    add_frontend_options(frontend)
    frontend.set_defaults(command=_run_frontend)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="smg-trio", description="a trio streaming gateway in front of LLM inference engines"
    )
    subparsers = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")
    add_serve_command(subparsers)
    add_demo_command(subparsers)
    add_frontend_command(subparsers)
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
