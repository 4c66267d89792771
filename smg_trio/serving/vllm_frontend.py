"""I/O. `smg-trio frontend ...`: smg-trio as `vllm serve`'s own front end (docs/vllm-frontend.md).

    VLLM_USE_RUST_FRONTEND=1 VLLM_RUST_FRONTEND_PATH=$(command -v smg-trio) vllm serve MODEL ...

vLLM binds the HTTP socket and the engines' ZMQ listeners, starts the EngineCore(s), does their
handshake, then runs `smg-trio frontend --listen-fd N --input-listener-fd X
--output-listener-fd Y --engine-start-index 0 --engine-count C --data-parallel-size D
[--coordinator-address A] --args-json JSON`. Here:

- `--args-json` becomes a GatewayConfig (serving/vllm_frontend_args.py); a flag we do not honour
  is one line on stderr and exit 2, so `vllm serve` stops with it;
- the model vLLM names is found as vLLM finds it (serving/vllm_frontend_model.py);
- `serve` runs on the inherited sockets: the HTTP one (it listens and serves HTTP/1.1, h2c,
  TLS with `--ssl-*`, WebSocket, exactly as `smg-trio serve`) and the engines' input and output
  (backends/zmq_adopted.py), one vLLM ZMQ worker of C engines;
- lifecycle, as vLLM's own API server: SIGTERM/SIGINT drain for `--shutdown-timeout` (a second
  signal ends the drain); we then exit 128 + the signal, never 0, since vLLM keeps its engines
  running after a front end that exits 0. Engines not all ready within
  `engine_ready_timeout_secs`, or none left alive (an engine that dies while another lives has
  its requests moved there: docs/resilience.md §9), is exit 1, and vLLM stops.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import trio

from smg_trio.backends.base import Backend
from smg_trio.backends.zmq_adopted import AdoptedListeners
from smg_trio.errors import ConfigError
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.http_listener import HTTP_LOGGER
from smg_trio.serving.process_role import InheritedSockets
from smg_trio.serving.serve import Serving, ShutdownTrigger, serve
from smg_trio.serving.vllm_frontend_args import (
    FrontendArgs,
    FrontendArgsError,
    gateway_config,
    parse_frontend_args,
)
from smg_trio.serving.vllm_frontend_model import (
    chat_template_source,
    pooling_convert,
    resolve_model,
)
from smg_trio.serving.worker_specs import WorkerSpec

logger = logging.getLogger(__name__)

ENGINE_WATCH_PERIOD_S: Final = 0.1
"""How often the engines' states are read: a lost last engine stops us within this (plus the
backend's own detection, milliseconds for a killed process: docs/resilience.md §1)."""
EXIT_ENGINES_GONE: Final = 1


@dataclass(frozen=True)
class HookLaunch:
    """The command line `vllm serve` runs us with (vllm/v1/utils.py RustFrontendProcessManager)."""

    listen_fd: int
    input_fd: int
    output_fd: int
    engine_start_index: int
    engine_count: int
    data_parallel_size: int
    args: dict[str, Any]
    grpc_listen_fd: int | None = None
    coordinator_address: str | None = None


def add_frontend_options(parser: argparse.ArgumentParser) -> None:
    for flag in ("--listen-fd", "--input-listener-fd", "--output-listener-fd"):
        parser.add_argument(flag, type=int, required=True, metavar="FD")
    for flag in ("--engine-start-index", "--engine-count", "--data-parallel-size"):
        parser.add_argument(flag, type=int, required=True, metavar="N")
    parser.add_argument("--grpc-listen-fd", type=int, metavar="FD")
    parser.add_argument("--coordinator-address", metavar="ADDRESS")
    parser.add_argument("--args-json", required=True, metavar="JSON")


def launch_of(ns: argparse.Namespace) -> HookLaunch:
    """The hook's command line, checked: what we cannot serve is a ConfigError naming it."""
    try:
        args = json.loads(ns.args_json)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--args-json is not JSON: {exc}") from exc
    if not isinstance(args, dict):
        raise ConfigError("--args-json must be a JSON object")
    launch = HookLaunch(
        listen_fd=ns.listen_fd,
        input_fd=ns.input_listener_fd,
        output_fd=ns.output_listener_fd,
        engine_start_index=ns.engine_start_index,
        engine_count=ns.engine_count,
        data_parallel_size=ns.data_parallel_size,
        args=args,
        grpc_listen_fd=ns.grpc_listen_fd,
        coordinator_address=ns.coordinator_address,
    )
    if launch.grpc_listen_fd is not None:
        raise ConfigError("--grpc-listen-fd: the smg-trio front end serves no vLLM gRPC API")
    if launch.engine_count < 1:
        raise ConfigError(f"--engine-count must be at least 1, got {launch.engine_count}")
    if launch.engine_start_index != 0 or launch.data_parallel_size != launch.engine_count:
        raise ConfigError(
            f"engines {launch.engine_start_index}..{launch.engine_start_index + launch.engine_count - 1}"
            f" of {launch.data_parallel_size}: the smg-trio front end drives every rank of its "
            "data-parallel group itself (no engines on other nodes)"
        )
    return launch


def frontend_setup(launch: HookLaunch) -> tuple[FrontendArgs, GatewayConfig, InheritedSockets]:
    """The config and sockets to serve with; ConfigError (FrontendArgsError for a flag) first."""
    args = parse_frontend_args(launch.args)
    model_path = resolve_model(args.model, revision=args.revision, download_dir=args.download_dir)
    if args.tokenizer is not None:
        tokenizer = resolve_model(
            args.tokenizer, revision=args.revision, download_dir=args.download_dir
        )
        if tokenizer != model_path:
            raise FrontendArgsError(
                f"vLLM flag --tokenizer {args.tokenizer}: the smg-trio front end reads the "
                "tokenizer from the model's own folder"
            )
    worker = WorkerSpec(Runtime.VLLM, Wire.ZMQ, f"fd:{launch.input_fd},{launch.output_fd}")
    template_file, template_text = chat_template_source(args.chat_template)
    convert = args.convert
    if args.runner == "pooling" and convert is None:
        convert = pooling_convert(model_path)
    config = gateway_config(
        args,
        model_path,
        worker,
        template_file=template_file,
        template_text=template_text,
        convert=convert,
        dev_mode=_dev_mode(os.environ),
    )
    listeners = AdoptedListeners(launch.input_fd, launch.output_fd, launch.engine_count)
    return args, config, InheritedSockets(launch.listen_fd, {worker: listeners})


def _dev_mode(environ: Mapping[str, str]) -> bool:
    """vLLM's VLLM_SERVER_DEV_MODE (an integer, 0 by default), which `vllm serve` passes on in
    our environment: its dev routes (/collective_rpc, docs/vllm-frontend.md §10) when set."""
    value = environ.get("VLLM_SERVER_DEV_MODE", "0")
    try:
        return bool(int(value))
    except ValueError:
        raise ConfigError(f"VLLM_SERVER_DEV_MODE={value}: not an integer") from None


@contextmanager
def _signals() -> Iterator[tuple[ShutdownTrigger, list[int]]]:
    """A trigger returning at the next SIGINT or SIGTERM, and the signals received so far."""
    received: list[int] = []
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def next_signal() -> None:
            async for signum in signals:
                received.append(signum)
                return

        yield next_signal, received


async def run_frontend(
    config: GatewayConfig, inherited: InheritedSockets, engine_ready_timeout_s: float
) -> int:
    """Serve until a signal (drained: 128 + the signal) or until no engine is left (1)."""
    exit_code = 0
    with _signals() as (next_signal, received):
        async with trio.open_nursery() as nursery:

            async def serve_then_stop(task_status: trio.TaskStatus[Serving]) -> None:
                await serve(
                    config,
                    task_status=task_status,
                    shutdown_trigger=next_signal,
                    hurry_trigger=next_signal,
                    inherited=inherited,
                )
                nursery.cancel_scope.cancel()  # drained: the watcher has nothing left to watch

            serving: Serving = await nursery.start(serve_then_stop)
            backend = serving.gateway.pool.workers[0].backend
            engines_gone = await _watch_engines(backend, engine_ready_timeout_s)
            exit_code = EXIT_ENGINES_GONE if engines_gone else 0
            nursery.cancel_scope.cancel()
    if received:
        return 128 + received[0]
    return exit_code


async def _watch_engines(backend: Backend, ready_timeout_s: float) -> bool:
    """Wait (at most `ready_timeout_s`) for every engine's ready message, then until none is
    left alive; True then (or when they were not all ready in time)."""
    with trio.move_on_after(ready_timeout_s) as waiting:
        while True:  # polled: the Backend protocol has no "every engine ready" event
            if all(engine.ready for engine in backend.statistics().engines):
                break
            await trio.sleep(ENGINE_WATCH_PERIOD_S)
    if waiting.cancelled_caught:
        logger.error("the engines were not all ready within %s s", ready_timeout_s)
        return True
    engines = backend.statistics().engines
    logger.info(
        "%d engine(s) ready: max_model_len %s, vLLM %s",
        len(engines),
        engines[0].max_model_len,
        engines[0].version,
    )
    while True:
        engines = backend.statistics().engines
        if all(engine.dead_reason is not None for engine in engines):
            reasons = "; ".join(f"engine {e.index}: {e.dead_reason}" for e in engines)
            logger.error("no engine is left (%s): stopping so that vllm serve stops", reasons)
            return True
        await trio.sleep(ENGINE_WATCH_PERIOD_S)


def main_frontend(ns: argparse.Namespace) -> int:
    """`smg-trio frontend ...`: check everything, then serve (cli.py runs it)."""
    from smg_trio.observability.request_log import logging_to_stderr
    from smg_trio.request.heap import pin_mmap_threshold

    launch = launch_of(ns)
    args, config, inherited = frontend_setup(launch)
    pin_mmap_threshold()
    with logging_to_stderr(args.log_level, "text"):
        logging.getLogger(HTTP_LOGGER).setLevel(args.http_log_level.upper())
        return trio.run(run_frontend, config, inherited, args.engine_ready_timeout_s)
