"""I/O. The reference gRPC engines' process: one grpclib server on asyncio (grpclib is asyncio
only; no trio here) serving one runtime's service, built from its `RuntimePolicy`, plus our own
`smg_trio.engine.EngineCounters` (counters, and the requests received: test-only), with one
`Scheduler` stepping every request.

    smg-trio engine sglang-grpc|vllm-grpc|mlx-grpc|trtllm-grpc|tokenspeed-grpc
        --host 127.0.0.1 --port PORT --model-path DIR [--step-ms X] [--max-batch N] ...

The service class is generated: every abstract RPC of the runtime's grpclib base gets a handler
here. Generate, Abort and GetTokenizer are shared, and Embed for the runtimes with an Embed
policy (a pooling model's vectors, `grpc_pooling`); the runtime answers the unary RPCs it lists;
any other RPC fails with UNIMPLEMENTED. Generate streams the runtime's chunk and complete
messages per step; a refused request ends with the policy's gRPC status. When the client
cancels the call (RST_STREAM), grpclib cancels the handler and the request leaves the batch
at once. The first stdout line is `listening on HOST:PORT` (port 0 picks a free one).
SIGTERM/SIGINT: health turns false, the server closes (cancelling open calls) and the process
exits 0 within `SHUTDOWN_GRACE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import logging
import signal
import socket
import zipfile
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Final

from google.protobuf import json_format
from google.protobuf.message import Message
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server

from smg_trio.engines import grpc_mlx, grpc_sglang, grpc_tokenspeed, grpc_trtllm, grpc_vllm
from smg_trio.engines.grpc_policy import (
    AbortedByRpc,
    AbortEnding,
    Rejected,
    RuntimePolicy,
    ServedModel,
    UnaryAnswer,
)
from smg_trio.engines.grpc_scheduler import Job, Scheduler
from smg_trio.wire._proto import common_pb2 as common
from smg_trio.wire._proto import smg_trio_engine_grpc
from smg_trio.wire._proto import smg_trio_engine_pb2 as counters_pb2

logger = logging.getLogger(__name__)

RUNTIMES: Final[dict[str, RuntimePolicy]] = {
    policy.engine_name: policy
    for policy in (
        grpc_sglang.POLICY,
        grpc_vllm.POLICY,
        grpc_mlx.POLICY,
        grpc_trtllm.POLICY,
        grpc_tokenspeed.POLICY,
    )
}
SHUTDOWN_GRACE_SECONDS: Final = 1.5
TOKENIZER_CHUNK_BYTES: Final = 64 * 1024
# What GetTokenizer zips from the model folder: tokenizer files plus the configs a gateway reads.
TOKENIZER_FILES: Final = (
    "tokenizer.json",
    "tokenizer_config.json",
    "config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.json",
    "chat_template.jinja",
)

Handler = Callable[[Any, Any], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class GrpcEngineConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port (printed on the first stdout line)
    step_seconds: float = 0.0
    max_batch: int = 256


class EngineCore:
    """The handlers every runtime shares, around one scheduler."""

    def __init__(self, policy: RuntimePolicy, scheduler: Scheduler) -> None:
        self.policy = policy
        self.scheduler = scheduler
        self.model: ServedModel = scheduler.model

    async def generate(self, stream: Any) -> None:
        request = await stream.recv_message()
        if request is None:
            raise GRPCError(Status.INVALID_ARGUMENT, "Generate needs a request message")
        fields = json_format.MessageToDict(request, preserving_proto_field_name=True)
        traceparent = stream.metadata.get("traceparent")
        if traceparent is not None:  # the client's trace context, as the gateway passed it on
            fields["traceparent"] = traceparent
        self.scheduler.received.record(request.request_id, fields)
        try:
            job = self.scheduler.submit(self.policy.admit(request, self.model))
        except Rejected as exc:
            self.scheduler.counters.requests_rejected += 1
            logger.info("refused %r: %s", request.request_id, exc.message)
            raise GRPCError(Status(exc.status.value), exc.message) from None
        try:
            await self._stream(stream, job)
        finally:
            self.scheduler.drop(job)  # a cancelled call leaves the batch here, at once

    async def embed(self, stream: Any) -> None:
        """Embed (docs/wire.md §C.8): admitted by the runtime's policy, pooled at a step."""
        embed = self.policy.embed
        assert embed is not None, "only a runtime with an Embed policy routes Embed here"
        request = await stream.recv_message()
        if request is None:
            raise GRPCError(Status.INVALID_ARGUMENT, "Embed needs a request message")
        fields = json_format.MessageToDict(request, preserving_proto_field_name=True)
        self.scheduler.received.record(request.request_id, fields)
        try:
            spec = embed.admit(request, self.model)
            job = self.scheduler.submit_pooling(spec)
        except Rejected as exc:
            self.scheduler.counters.requests_rejected += 1
            logger.info("refused %r: %s", request.request_id, exc.message)
            raise GRPCError(Status(exc.status.value), exc.message) from None
        try:
            result = await job.result
        finally:
            self.scheduler.drop(job)  # a cancelled call leaves the batch here, at once
        if isinstance(result, AbortedByRpc):
            raise GRPCError(
                Status.INTERNAL, f"Embed request {spec.request_id} did not produce a result"
            )
        await self._send(stream, embed.reply(spec, result))

    async def _stream(self, stream: Any, job: Job) -> None:
        policy, spec = self.policy, job.spec
        while True:
            delivery = await job.outbox.get()
            if isinstance(delivery.ending, AbortedByRpc):
                match policy.abort_ending:
                    case AbortEnding.SILENT:
                        return
                    case AbortEnding.STATUS:
                        raise GRPCError(Status.INTERNAL, f"request {spec.request_id} was aborted")
                    case AbortEnding.COMPLETE:
                        pass
            if spec.stream:
                await self._send(stream, policy.chunk(self.model, spec, delivery))
            if delivery.ending is not None:
                await self._send(stream, policy.complete(self.model, spec, delivery))
                return

    async def _send(self, stream: Any, message: Message) -> None:
        await stream.send_message(message)
        self.scheduler.counters.output_messages += 1

    async def abort(self, stream: Any) -> None:
        request = await stream.recv_message()
        ended = sum(self.scheduler.abort(rid) for rid in self.policy.abort_targets(request))
        await stream.send_message(self.policy.abort_reply(request, ended))

    def unary(self, answer: UnaryAnswer) -> Handler:
        async def handle(servicer: Any, stream: Any) -> None:
            request = await stream.recv_message()
            await stream.send_message(answer(request, self.scheduler.view()))

        return handle

    async def get_tokenizer(self, stream: Any) -> None:
        await stream.recv_message()
        bundle, digest = self._tokenizer_bundle
        for offset in range(0, len(bundle), TOKENIZER_CHUNK_BYTES):
            last = offset + TOKENIZER_CHUNK_BYTES >= len(bundle)
            await stream.send_message(
                common.GetTokenizerChunk(
                    data=bundle[offset : offset + TOKENIZER_CHUNK_BYTES],
                    sha256=digest if last else "",
                )
            )

    @cached_property
    def _tokenizer_bundle(self) -> tuple[bytes, str]:
        """A zip of the model folder's tokenizer files (fixed timestamps: a stable digest)."""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
            for name in TOKENIZER_FILES:
                path = self.model.path / name
                if path.is_file():
                    bundle.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), path.read_bytes())
        data = buffer.getvalue()
        return data, hashlib.sha256(data).hexdigest()


def build_servicer(core: EngineCore) -> Any:
    """An instance of the runtime's grpclib base with a handler for each of its RPCs."""
    policy = core.policy
    handlers: dict[str, Handler] = {}
    for name in sorted(policy.service_base.__abstractmethods__):
        handlers[name] = _handler(core, name)
    service = type(f"Reference{policy.service_base.__name__}", (policy.service_base,), handlers)
    return service()


def _handler(core: EngineCore, name: str) -> Handler:
    shared: dict[str, Callable[[Any], Coroutine[Any, Any, None]]] = {
        "Generate": core.generate,
        "Abort": core.abort,
        "GetTokenizer": core.get_tokenizer,
    }
    if core.policy.embed is not None:
        shared["Embed"] = core.embed
    if name in shared:
        method = shared[name]

        async def handle(servicer: Any, stream: Any) -> None:
            await method(stream)

        return handle
    answer = core.policy.unary.get(name)
    if answer is not None:
        return core.unary(answer)

    async def unimplemented(servicer: Any, stream: Any) -> None:
        raise GRPCError(Status.UNIMPLEMENTED, f"{name} is not served by this reference engine")

    return unimplemented


class CountersService(smg_trio_engine_grpc.EngineCountersBase):
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    async def Get(self, stream: Any) -> None:
        await stream.recv_message()
        await stream.send_message(
            counters_pb2.GetCountersResponse(counters=self.scheduler.counters.snapshot())
        )

    async def GetReceived(self, stream: Any) -> None:
        request = await stream.recv_message()
        received = self.scheduler.received.latest(request.request_id)
        await stream.send_message(
            counters_pb2.GetReceivedResponse(
                found=received is not None, request_json=json.dumps(received or {})
            )
        )


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio and grpclib set TCP_NODELAY only on sockets that say so,
    # and with Nagle on, small replies wait ~40 ms for the peer's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


async def serve(policy: RuntimePolicy, model: ServedModel, config: GrpcEngineConfig) -> int:
    """Serve until SIGTERM/SIGINT (0) or until the stepping task fails (1)."""
    scheduler = Scheduler(model, step_seconds=config.step_seconds, max_batch=config.max_batch)
    server = Server([build_servicer(EngineCore(policy, scheduler)), CountersService(scheduler)])
    sock = _listening_socket(config.host, config.port)
    await server.start(sock=sock)
    print(f"listening on {config.host}:{sock.getsockname()[1]}", flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stepper = asyncio.create_task(scheduler.run())
    stepper.add_done_callback(lambda _: stop.set())
    logger.info("%s serving %s", policy.engine_name, model.path)
    try:
        await stop.wait()
    finally:
        scheduler.serving = False
        server.close()
        try:
            await asyncio.wait_for(server.wait_closed(), SHUTDOWN_GRACE_SECONDS)
        except TimeoutError:
            logger.warning("open calls did not end within %ss", SHUTDOWN_GRACE_SECONDS)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    if stepper.done() and not stepper.cancelled() and stepper.exception() is not None:
        logger.error("the stepping task failed", exc_info=stepper.exception())
        return 1
    stepper.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await stepper
    return 0


def run_grpc_engine(policy: RuntimePolicy, model: ServedModel, config: GrpcEngineConfig) -> int:
    return asyncio.run(serve(policy, model, config))
