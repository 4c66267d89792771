"""I/O. The `smg-trio engine ...` subcommands: flags, loading the model folder into an
`EngineModel` (and, for the gRPC engines, a `ServedModel`), and starting a reference engine.

    smg-trio engine vllm-zmq --handshake tcp://HOST:PORT | --data-addresses INPUT OUTPUT
        [--model-path DIR] [--step-ms X]
        [--max-batch N] [--mode random|echo|replay] [--replay-file PATH]
        [--eos-probability P] [--max-model-len N] [--engine-index N] [--log-level LEVEL]
        [--reasoning-parser qwen3|deepseek_r1]
    smg-trio engine tokenspeed-zmq ... (the same flags but --reasoning-parser)
    smg-trio engine sglang-grpc|vllm-grpc|mlx-grpc|trtllm-grpc|tokenspeed-grpc
        [--host 127.0.0.1] [--port PORT] (0: a free one, printed as `listening on HOST:PORT`)
        [--model-path DIR] [--step-ms X] [--max-batch N] [--mode ...] [--replay-file PATH]
        [--eos-probability P] [--max-model-len N] [--log-level LEVEL]
        [--runner generate|pooling] (vllm-grpc and sglang-grpc: pooling answers Embed)
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from smg_trio.engines.batching import EngineConfig
from smg_trio.engines.generation import (
    DEFAULT_EOS_PROBABILITY,
    Mode,
    TokenSource,
    ordinary_token_ids,
)
from smg_trio.engines.reasoning_gate import REASONING_END_MARKERS, reasoning_end_ids
from smg_trio.engines.schema_instance import answers_in_json
from smg_trio.engines.tokenspeed_zmq_engine import run_tokenspeed_engine
from smg_trio.engines.vllm_zmq_engine import run_vllm_engine
from smg_trio.engines.wire_adapter import BLOCK_SIZE, EngineModel
from smg_trio.engines.worker_extension import load_worker
from smg_trio.errors import ConfigError
from smg_trio.model.folder import ModelDir, demo_model_path, load_model_dir, read_json_object

if TYPE_CHECKING:
    from smg_trio.engines.grpc_policy import ServedModel

WIRE_DTYPES: Final = ("bfloat16", "float16", "float32")  # what the registration maps may say
DEFAULT_CONTEXT: Final = 4096  # when the model folder declares none

EngineRunner = Callable[[EngineModel, EngineConfig], int]
ENGINES: Final[dict[str, tuple[EngineRunner, str]]] = {
    "vllm-zmq": (run_vllm_engine, "a reference vLLM EngineCore on the ZMQ wire"),
    "tokenspeed-zmq": (run_tokenspeed_engine, "a reference TokenSpeed scheduler on the ZMQ wire"),
}


def load_engine_model(
    path: str | Path,
    *,
    mode: Mode = Mode.RANDOM,
    replay_text: str | None = None,
    eos_probability: float = DEFAULT_EOS_PROBABILITY,
    max_model_len: int | None = None,
    max_batch: int = 256,
) -> EngineModel:
    """The fake model an engine serves, from a model folder (tokenizer, configs; no weights)."""
    return _engine_model(
        load_model_dir(path),
        mode=mode,
        replay_text=replay_text,
        eos_probability=eos_probability,
        max_model_len=max_model_len,
        max_batch=max_batch,
    )


def load_served_model(
    path: str | Path,
    *,
    mode: Mode = Mode.RANDOM,
    replay_text: str | None = None,
    eos_probability: float = DEFAULT_EOS_PROBABILITY,
    max_model_len: int | None = None,
    max_batch: int = 256,
) -> ServedModel:
    """What a reference gRPC engine serves: the fake model plus its tokenizer and folder."""
    from smg_trio.engines.grpc_policy import ServedModel  # gRPC only: see engine_main

    model_dir = load_model_dir(path)
    engine = _engine_model(
        model_dir,
        mode=mode,
        replay_text=replay_text,
        eos_probability=eos_probability,
        max_model_len=max_model_len,
        max_batch=max_batch,
    )
    config = read_json_object(model_dir.path / "config.json") or {}
    return ServedModel(engine, model_dir.tokenizer, model_dir.path, config, max_batch)


def _engine_model(
    model_dir: ModelDir,
    *,
    mode: Mode,
    replay_text: str | None,
    eos_probability: float,
    max_model_len: int | None,
    max_batch: int,
) -> EngineModel:
    tokenizer = model_dir.tokenizer
    primary, extra = model_dir.eos_ids.primary, model_dir.eos_ids.extra
    eos_ids = (primary, *extra) if primary is not None else model_dir.tokenizer_eos_ids
    replay_ids: tuple[int, ...] = ()
    if replay_text is not None:
        replay_ids = tuple(tokenizer.encode(replay_text, add_special_tokens=False))
    try:
        source = TokenSource(
            mode,
            ordinary_token_ids(tokenizer),
            eos_ids=eos_ids,
            eos_probability=eos_probability,
            replay_ids=replay_ids,
            answers_in_json=replay_text is not None and answers_in_json(replay_text),
        )
    except ValueError as exc:
        raise ConfigError(f"{model_dir.path}: {exc}") from exc
    context = max_model_len or model_dir.context_length or DEFAULT_CONTEXT
    config = read_json_object(model_dir.path / "config.json") or {}
    dtype = config.get("torch_dtype") or config.get("dtype")
    return EngineModel(
        source=source,
        vocab_size=tokenizer.vocab_size,
        max_model_len=context,
        eos_ids=eos_ids,
        served_name=model_dir.served_name,
        dtype=dtype if dtype in WIRE_DTYPES else "bfloat16",
        num_gpu_blocks=max_batch * math.ceil(context / BLOCK_SIZE),
        tokenizer=tokenizer,
        hidden_size=_hidden_size(config),
        num_labels=_num_labels(config),
        model_type=str(config.get("model_type") or ""),
    )


def _hidden_size(config: dict[str, Any]) -> int:
    """The pooler's embedding size: config.json's `hidden_size` (docs/pooling.md §5)."""
    hidden = config.get("hidden_size")
    if isinstance(hidden, int) and not isinstance(hidden, bool) and hidden > 0:
        return hidden
    return EngineModel.hidden_size


def _num_labels(config: dict[str, Any]) -> int:
    """The classifier's classes: config.json's `id2label`, else two (as transformers')."""
    labels = config.get("id2label")
    return len(labels) if isinstance(labels, dict) and labels else EngineModel.num_labels


def add_engine_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `engine <wire>` on the top-level parser's subcommands."""
    engine = subparsers.add_parser("engine", help="run a reference engine")
    wires = engine.add_subparsers(dest="wire", required=True, metavar="WIRE")
    _add_zmq_engines(wires)
    _add_grpc_engines(wires)


def engine_parser(kind: str | None) -> argparse.ArgumentParser:
    """`smg-trio engine`'s parser on its own (`python -m smg_trio.engines KIND ...`, what
    EngineCommand launches). For a ZMQ `kind` it registers the ZMQ engines only, so the gRPC
    modules are never imported: every engine the tests, benches and demo start pays its imports
    (docs/architecture.md §8.1)."""
    parser = argparse.ArgumentParser(prog="smg-trio engine", description="run a reference engine")
    wires = parser.add_subparsers(dest="wire", required=True, metavar="WIRE")
    _add_zmq_engines(wires)
    if kind not in ENGINES:
        _add_grpc_engines(wires)
    return parser


def engine_main(argv: Sequence[str]) -> int:
    """Run the engine `argv` names; a configuration problem exits 2 naming it, as `smg-trio`."""
    args = engine_parser(argv[0] if argv else None).parse_args(argv)
    try:
        code: int = args.command(args)
    except ConfigError as exc:
        print(f"smg-trio: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


def _add_zmq_engines(wires: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, (_, description) in ENGINES.items():
        parser = wires.add_parser(name, help=description, description=description)
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument(
            "--handshake", metavar="tcp://HOST:PORT", help="the frontend's handshake ROUTER to dial"
        )
        target.add_argument(
            "--data-addresses",
            nargs=2,
            metavar=("INPUT", "OUTPUT"),
            help="connect straight to the frontend's input and output sockets, as vLLM's "
            "engines do under `vllm serve`'s front-end hook (no handshake)",
        )
        parser.add_argument(
            "--engine-index", type=int, default=0, help="engine index (2-byte ZMQ identity)"
        )
        _add_model_flags(parser)
        if name == "vllm-zmq":
            parser.add_argument(
                "--kv-events-endpoint",
                metavar="ENDPOINT",
                help="keep a prefix cache and publish vLLM's KV events on this ZMQ endpoint "
                "(bound; e.g. ipc:///tmp/kv.sock or tcp://127.0.0.1:5557); cached prompt tokens "
                "are then reported in the prefill stats, as vLLM does",
            )
            parser.add_argument(
                "--kv-events-replay-endpoint",
                metavar="ENDPOINT",
                help="the KV-event replay (ROUTER) endpoint, bound",
            )
            parser.add_argument(
                "--kv-cache-blocks",
                type=_positive_int,
                help="prefix cache capacity in blocks of 16 tokens (default: the model's)",
            )
            parser.add_argument(
                "--disable-log-stats",
                action="store_true",
                help="as vLLM's: send no scheduler stats (load, prefix-cache counts) with the "
                "outputs",
            )
            parser.add_argument(
                "--worker-extension-cls",
                metavar="MODULE.CLASS",
                help="as vLLM's: a class whose methods are mixed into the engine's worker, "
                "for the collective_rpc utility call (engines/worker_extension.py)",
            )
            parser.add_argument(
                "--reasoning-parser",
                choices=sorted(REASONING_END_MARKERS),
                help="as vLLM's: a structured-output grammar then starts after the reasoning "
                "when the ADD's reasoning_ended is false",
            )
        parser.set_defaults(command=run_engine_command)


def _add_grpc_engines(wires: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from smg_trio.engines.grpc_engine import RUNTIMES  # grpclib and protobuf: gRPC engines only

    for name, policy in RUNTIMES.items():
        parser = wires.add_parser(name, help=policy.description, description=policy.description)
        parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
        parser.add_argument(
            "--port", type=int, default=0, help="port to listen on; 0 = a free one (printed)"
        )
        _add_model_flags(parser)
        if policy.embed is not None:
            parser.add_argument(
                "--runner",
                choices=("generate", "pooling"),
                default="generate",
                help="as vLLM's: `pooling` serves the model as an embedding model (Embed "
                "answers, Generate is refused; SGLang's spelling is --is-embedding)",
            )
        if name == "vllm-grpc":
            parser.add_argument(
                "--mm-processor",
                choices=("off", "inprocess"),
                default="off",
                help="as smg-grpc-servicer's: `inprocess` takes images as media_refs (the "
                "worker processes them; advertised in GetServerInfo)",
            )
        parser.set_defaults(command=run_grpc_engine_command)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model-path",
        default=str(demo_model_path()),
        help="model folder (tokenizer and configs); default: the shipped demo model",
    )
    parser.add_argument(
        "--step-ms", type=float, default=0.0, help="time per batch step; 0 = as fast as possible"
    )
    parser.add_argument(
        "--max-batch", type=_positive_int, default=256, help="most requests generating at once"
    )
    parser.add_argument("--mode", choices=[m.value for m in Mode], default=Mode.RANDOM.value)
    parser.add_argument("--replay-file", help="text the replay mode says (UTF-8)")
    parser.add_argument(
        "--eos-probability",
        type=float,
        default=DEFAULT_EOS_PROBABILITY,
        help="chance per token that random mode says an EOS id",
    )
    parser.add_argument(
        "--max-model-len", type=_positive_int, help="context length; default: the model's"
    )
    parser.add_argument("--log-level", default="INFO")


def _model_options(args: argparse.Namespace) -> dict[str, Any]:
    """Logging set up and the model flags checked, as keywords for the model loaders."""
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s {args.wire}[%(process)d] %(name)s: %(message)s",
    )
    mode = Mode(args.mode)
    if args.step_ms < 0:
        raise ConfigError("--step-ms must not be negative")
    if (mode is Mode.REPLAY) != (args.replay_file is not None):
        raise ConfigError("--replay-file goes with --mode replay, and only with it")
    replay_text = None
    if args.replay_file is not None:
        try:
            replay_text = Path(args.replay_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{args.replay_file}: cannot read it: {exc}") from exc
    return {
        "mode": mode,
        "replay_text": replay_text,
        "eos_probability": args.eos_probability,
        "max_model_len": args.max_model_len,
        "max_batch": args.max_batch,
    }


def run_engine_command(args: argparse.Namespace) -> int:
    model = load_engine_model(args.model_path, **_model_options(args))
    parser = getattr(args, "reasoning_parser", None)
    if parser is not None and model.tokenizer is not None:
        try:
            end_ids = reasoning_end_ids(parser, model.tokenizer)
        except ValueError as exc:
            raise ConfigError(f"--reasoning-parser: {exc}") from exc
        model = dataclasses.replace(model, reasoning_end_ids=end_ids)
    config = EngineConfig(
        handshake_address=args.handshake or "",
        engine_index=args.engine_index,
        data_addresses=None if args.data_addresses is None else tuple(args.data_addresses),
        step_seconds=args.step_ms / 1000,
        max_batch=args.max_batch,
        kv_events_endpoint=getattr(args, "kv_events_endpoint", None),
        kv_events_replay_endpoint=getattr(args, "kv_events_replay_endpoint", None),
        kv_cache_blocks=getattr(args, "kv_cache_blocks", None),
        log_stats=not getattr(args, "disable_log_stats", False),
        worker_extension_cls=getattr(args, "worker_extension_cls", None),
    )
    if config.worker_extension_cls is not None:
        try:
            load_worker(config.worker_extension_cls)
        except ValueError as exc:
            raise ConfigError(f"--worker-extension-cls {exc}") from exc
    if config.kv_events_replay_endpoint is not None and config.kv_events_endpoint is None:
        raise ConfigError("--kv-events-replay-endpoint needs --kv-events-endpoint")
    runner, _ = ENGINES[args.wire]
    return runner(model, config)


def run_grpc_engine_command(args: argparse.Namespace) -> int:
    from smg_trio.engines.grpc_engine import RUNTIMES, GrpcEngineConfig, run_grpc_engine

    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be in [0, 65535], got {args.port}")
    model = load_served_model(args.model_path, **_model_options(args))
    if getattr(args, "runner", "generate") == "pooling":
        model = dataclasses.replace(model, pooling=True)
    if getattr(args, "mm_processor", "off") == "inprocess":
        model = dataclasses.replace(model, mm_processor=True)
    config = GrpcEngineConfig(
        host=args.host, port=args.port, step_seconds=args.step_ms / 1000, max_batch=args.max_batch
    )
    return run_grpc_engine(RUNTIMES[args.wire], model, config)
