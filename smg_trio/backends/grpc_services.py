"""I/O. The asyncio side of the gRPC backend: what differs between the five engines' services
(grpclib stub, management messages and how to read them), the calls themselves as coroutines
for the bridge's loop (`LoopClient`), and the exception seam that turns grpclib, h2 and socket
errors into `smg_trio.errors` (docs/wire.md §C, docs/stops-and-finalize.md §1.4).

Decisions:
- Every gRPC status becomes `EngineRejected` carrying the HTTP status of docs/stops-and-finalize.md §1.4 (INVALID_ARGUMENT
  is a 400 `EngineRejected`, not a `ClientError`): the engine refused, in its own words, and a
  router must not retry a 4xx elsewhere. `ClientError` stays for what WE reject before sending.
- A refused or failed connection is `BackendUnavailable` (nothing was generated; retryable).
- A connection lost or closed (GOAWAY) under a live call is `EngineDead`; a single stream reset
  by the engine is an `EngineRejected` 500 for that call only.
- The engine requests arrive finalized (every per-runtime rule applied); the per-engine
  builders only rename them onto each service's GenerateRequest.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from grpclib.client import Channel
from grpclib.exceptions import GRPCError, StreamTerminatedError
from grpclib.exceptions import ProtocolError as GrpclibProtocolError

from smg_trio.errors import (
    BackendError,
    BackendProtocolError,
    BackendUnavailable,
    ConfigError,
    EngineDead,
    EngineRejected,
    UnsupportedRuntime,
)
from smg_trio.neutral.runtime import Runtime
from smg_trio.neutral.sampling import EngineRequest
from smg_trio.neutral.validation import checked_ids, checked_prompt
from smg_trio.wire._proto import (
    mlx_engine_grpc,
    mlx_engine_pb2,
    sglang_scheduler_grpc,
    sglang_scheduler_pb2,
    tokenspeed_scheduler_grpc,
    tokenspeed_scheduler_pb2,
    trtllm_service_grpc,
    trtllm_service_pb2,
    vllm_engine_grpc,
    vllm_engine_pb2,
)
from smg_trio.wire.grpc_embed import GrpcEmbedding, parse_embed_response
from smg_trio.wire.grpc_messages import build_abort, build_generate
from smg_trio.wire.grpc_responses import GrpcEvent, http_status_for_grpc, parse_generate_response
from smg_trio.wire.vllm_media_refs import media_ref_schemes

TRTLLM_HEALTHY: Final = "OK"  # TRT-LLM's HealthCheckResponse is a status string, not a bool
CHANNEL_CLOSE_WAIT_S: Final = 1.0
CHANNEL_CLOSE_POLL_S: Final = 0.001


@dataclass(frozen=True)
class GrpcService:
    """One engine's service: stub class, request classes and response conventions."""

    runtime: Runtime
    stub_class: Any
    health_request: Any
    model_info_request: Any
    server_info_request: Any
    cumulative_complete: bool
    """The complete message repeats every token of the output (all but vLLM, whose streaming
    complete carries only the last delta; grpc_responses.py)."""


_SERVICES: Final = {
    Runtime.VLLM: GrpcService(
        Runtime.VLLM,
        vllm_engine_grpc.VllmEngineStub,
        vllm_engine_pb2.HealthCheckRequest,
        vllm_engine_pb2.GetModelInfoRequest,
        vllm_engine_pb2.GetServerInfoRequest,
        cumulative_complete=False,
    ),
    Runtime.SGLANG: GrpcService(
        Runtime.SGLANG,
        sglang_scheduler_grpc.SglangSchedulerStub,
        sglang_scheduler_pb2.HealthCheckRequest,
        sglang_scheduler_pb2.GetModelInfoRequest,
        sglang_scheduler_pb2.GetServerInfoRequest,
        cumulative_complete=True,
    ),
    Runtime.TOKENSPEED: GrpcService(
        Runtime.TOKENSPEED,
        tokenspeed_scheduler_grpc.TokenSpeedSchedulerStub,
        tokenspeed_scheduler_pb2.HealthCheckRequest,
        tokenspeed_scheduler_pb2.GetModelInfoRequest,
        tokenspeed_scheduler_pb2.GetServerInfoRequest,
        cumulative_complete=True,
    ),
    Runtime.MLX: GrpcService(
        Runtime.MLX,
        mlx_engine_grpc.MlxEngineStub,
        mlx_engine_pb2.HealthCheckRequest,
        mlx_engine_pb2.GetModelInfoRequest,
        mlx_engine_pb2.GetServerInfoRequest,
        cumulative_complete=True,
    ),
    Runtime.TRTLLM: GrpcService(
        Runtime.TRTLLM,
        trtllm_service_grpc.TrtllmServiceStub,
        trtllm_service_pb2.HealthCheckRequest,
        trtllm_service_pb2.GetModelInfoRequest,
        trtllm_service_pb2.GetServerInfoRequest,
        cumulative_complete=True,
    ),
}


def service_for(runtime: Runtime) -> GrpcService:
    try:
        return _SERVICES[runtime]
    except KeyError:
        raise UnsupportedRuntime(f"runtime {runtime.value!r} has no gRPC service") from None


class EngineInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What the engine says about its model and itself (GetModelInfo, GetServerInfo)."""

    max_model_len: int | None
    vocab_size: int | None
    served_model_name: str = ""
    version: str = ""
    # vLLM's worker-side image processing (GetServerInfo.mm_processor, mm_media_ref_schemes):
    # the URL schemes it fetches for `media_refs`; empty: it takes tensors only
    # (docs/images.md §5.1).
    media_ref_schemes: frozenset[str] = frozenset()


def health_of(response: Any) -> tuple[bool, str]:
    """(healthy, the engine's message) from any engine's HealthCheckResponse."""
    if isinstance(response, trtllm_service_pb2.HealthCheckResponse):
        return response.status == TRTLLM_HEALTHY, response.status
    return bool(response.healthy), str(response.message)


def engine_info_of(model_info: Any, server_info: Any | None) -> EngineInfo:
    """The context length (TRT-LLM: max_seq_len), vocabulary and a version string if any."""
    if isinstance(model_info, trtllm_service_pb2.GetModelInfoResponse):
        max_len, name = model_info.max_seq_len, model_info.model_id
    else:
        max_len, name = model_info.max_context_length, model_info.served_model_name
    version = ""
    schemes: frozenset[str] = frozenset()
    if isinstance(server_info, vllm_engine_pb2.GetServerInfoResponse) and server_info.mm_processor:
        schemes = media_ref_schemes(server_info.mm_media_ref_schemes)
    if isinstance(server_info, trtllm_service_pb2.GetServerInfoResponse):
        version = server_info.version
    elif isinstance(
        server_info, vllm_engine_pb2.GetServerInfoResponse | mlx_engine_pb2.GetServerInfoResponse
    ):
        version = server_info.server_type
    return EngineInfo(
        max_model_len=max_len if max_len > 0 else None,
        vocab_size=model_info.vocab_size if model_info.vocab_size > 0 else None,
        served_model_name=name,
        version=version,
        media_ref_schemes=schemes,
    )


def generate_message(
    service: GrpcService, request: EngineRequest, engine_request_id: str, info: EngineInfo | None
) -> Any:
    """The engine's GenerateRequest for one engine request.

    Raises `ClientError` for what the engine would refuse: a prompt that leaves no room in the
    context, a token id outside the vocabulary, a value its protobuf field cannot hold.
    """
    vocab = None if info is None else info.vocab_size
    if info is not None and info.max_model_len is not None:
        checked_prompt(request.prompt_ids, info.max_model_len, vocab)
    else:
        checked_ids(request.prompt_ids, "prompt", vocab)
    schemes = frozenset() if info is None else info.media_ref_schemes
    return build_generate(service.runtime, request, engine_request_id, media_ref_schemes=schemes)


def engine_rejection(error: GRPCError) -> EngineRejected:
    """A gRPC status from the engine as the error the front end renders (docs/stops-and-finalize.md §1.4)."""
    name = getattr(error.status, "name", str(error.status))
    reason = f"{name}: {error.message}" if error.message else name
    return EngineRejected(reason, status=http_status_for_grpc(error.status))


@contextmanager
def translated_errors(address: str) -> Iterator[None]:
    """Run a grpclib call (on the loop) with its foreign exceptions translated (module doc).

    `asyncio.CancelledError` passes through untouched: it is the caller cancelling.
    """
    try:
        yield
    except BackendError:
        raise
    except GRPCError as exc:
        raise engine_rejection(exc) from None
    except StreamTerminatedError as exc:
        reason = str(exc)  # grpclib gives only a reason string
        if reason.startswith(("Stream reset", "Protocol error")):
            raise EngineRejected(f"the engine reset the stream ({reason})") from None
        raise EngineDead(f"the connection to the engine at {address} was lost ({reason})") from None
    except (TimeoutError, ConnectionError, OSError) as exc:
        raise BackendUnavailable(f"cannot reach the engine at {address}: {exc}") from None
    except GrpclibProtocolError as exc:
        raise BackendProtocolError(f"gRPC protocol error with {address}: {exc}") from None
    except Exception as exc:  # h2 and codec errors: the peer spoke something we cannot read
        raise BackendProtocolError(
            f"unexpected {type(exc).__name__} from the engine at {address}: {exc}"
        ) from None


class LoopClient:
    """The calls to one engine, as coroutines for the bridge's asyncio loop (never trio).

    Create it on the loop (`open_loop_client`): grpclib binds its channel to the running loop.
    Every method raises only our errors (or `asyncio.CancelledError`).
    """

    def __init__(self, service: GrpcService, channel: Channel, address: str) -> None:
        self.service = service
        self.channel = channel
        self.address = address
        self._stub: Any = service.stub_class(channel)

    async def generate(
        self,
        message: Any,
        on_event: Callable[[GrpcEvent], None],
        metadata: Sequence[tuple[str, str]] = (),
    ) -> None:
        """One server-streaming Generate call; every parsed response goes to `on_event`.
        `metadata`: the request's W3C trace context, when traced (docs/observability.md §4)."""
        with translated_errors(self.address):
            async with self._stub.Generate.open(metadata=list(metadata) or None) as grpc_stream:
                await grpc_stream.send_message(message, end=True)
                async for response in grpc_stream:
                    on_event(parse_generate_response(response))

    async def embed(self, message: Any) -> GrpcEmbedding:
        """One unary Embed call (vLLM, SGLang; docs/wire.md §C.8)."""
        with translated_errors(self.address):
            return parse_embed_response(await self._stub.Embed(message))

    async def abort(self, engine_request_ids: list[str]) -> None:
        with translated_errors(self.address):
            for request in build_abort(self.service.runtime, engine_request_ids):
                await self._stub.Abort(request)

    async def health(self) -> tuple[bool, str]:
        with translated_errors(self.address):
            return health_of(await self._stub.HealthCheck(self.service.health_request()))

    async def info(self) -> EngineInfo:
        with translated_errors(self.address):
            model_info = await self._stub.GetModelInfo(self.service.model_info_request())
        try:
            with translated_errors(self.address):
                server_info = await self._stub.GetServerInfo(self.service.server_info_request())
        except BackendError:  # optional: only the version string comes from it
            server_info = None
        return engine_info_of(model_info, server_info)

    async def close(self) -> None:
        await close_channel(self.channel)


async def open_loop_client(
    runtime: Runtime, host: str, port: int, tls: bool | ssl.SSLContext
) -> LoopClient:
    """Run on the loop: a client with a fresh (lazily connecting) channel."""
    return LoopClient(service_for(runtime), Channel(host, port, ssl=tls or None), f"{host}:{port}")


async def close_channel(channel: Channel) -> None:
    """Run on the loop: close `channel` and wait (bounded) until its socket is really closed.

    `Channel.close()` only starts closing: a TLS connection closes its socket after the
    close_notify exchange, a plain one on the loop's next turn. A loop stopped before that
    leaks the socket, so the bridge's owners wait here. grpclib keeps the live connection in
    private attributes; if they change, this degrades to not waiting.
    """
    protocol = getattr(channel, "_protocol", None)
    transport = getattr(getattr(protocol, "connection", None), "_transport", None)
    sock = None if transport is None else transport.get_extra_info("socket")
    channel.close()
    if sock is None:
        return
    for _ in range(round(CHANNEL_CLOSE_WAIT_S / CHANNEL_CLOSE_POLL_S)):
        if sock.fileno() == -1:  # asyncio's socket wrapper says -1 once closed
            return
        await asyncio.sleep(CHANNEL_CLOSE_POLL_S)


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` (a `grpc://` prefix is accepted) → (host, port)."""
    bare = address.removeprefix("grpc://")
    host, sep, port = bare.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"a gRPC engine address is host:port, got {address!r}")
    return host, int(port)
