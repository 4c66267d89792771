"""A tiny vLLM-service grpclib server on its own asyncio thread, for the failure modes the
reference engines do not produce on purpose: a stream that ends without a complete message,
an engine that reports itself unhealthy, a gRPC status in the middle of a stream.

It speaks the real `vllm.grpc.engine.VllmEngine` wire (our generated base class). Generation is
one token per chunk, token i = 100 + i, every `step_s`; `behaviour` picks the fault.
"""

from __future__ import annotations

import asyncio
import enum
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server

from smg_trio.wire._proto import vllm_engine_grpc
from smg_trio.wire._proto import vllm_engine_pb2 as pb

MAX_CONTEXT = 4096
VOCAB = 1000


class Behaviour(enum.Enum):
    NORMAL = "normal"
    END_WITHOUT_COMPLETE = "end_without_complete"
    FAIL_AFTER_TWO_TOKENS = "fail_after_two_tokens"  # RESOURCE_EXHAUSTED mid-stream
    UNHEALTHY = "unhealthy"


class FaultyVllmEngine(vllm_engine_grpc.VllmEngineBase):
    def __init__(self, behaviour: Behaviour, step_s: float) -> None:
        self.behaviour = behaviour
        self.step_s = step_s
        self.aborted: list[str] = []
        self.health_delay_s = 0.0  # a test raises it to play a busy engine's slow HealthCheck
        self.cancelled_handlers = 0
        self.generate_calls = 0

    async def Generate(self, stream: Any) -> None:
        self.generate_calls += 1
        request = await stream.recv_message()
        max_tokens = request.sampling_params.max_tokens or 16
        try:
            for i in range(max_tokens):
                await asyncio.sleep(self.step_s)
                if self.behaviour is Behaviour.FAIL_AFTER_TWO_TOKENS and i == 2:
                    raise GRPCError(Status.RESOURCE_EXHAUSTED, "KV cache is full")
                chunk = pb.GenerateStreamChunk(
                    token_ids=[100 + i],
                    prompt_tokens=len(request.tokenized.input_ids),
                    completion_tokens=i + 1,
                )
                await stream.send_message(pb.GenerateResponse(chunk=chunk))
            if self.behaviour is Behaviour.END_WITHOUT_COMPLETE:
                return
            complete = pb.GenerateComplete(
                output_ids=[100 + max_tokens - 1],
                finish_reason="length",
                prompt_tokens=len(request.tokenized.input_ids),
                completion_tokens=1,
            )
            await stream.send_message(pb.GenerateResponse(complete=complete))
        except asyncio.CancelledError:
            self.cancelled_handlers += 1
            raise

    async def HealthCheck(self, stream: Any) -> None:
        await stream.recv_message()
        await asyncio.sleep(self.health_delay_s)
        healthy = self.behaviour is not Behaviour.UNHEALTHY
        await stream.send_message(pb.HealthCheckResponse(healthy=healthy, message="test"))

    async def Abort(self, stream: Any) -> None:
        request = await stream.recv_message()
        self.aborted.extend(request.request_ids)
        await stream.send_message(pb.AbortResponse())

    async def GetModelInfo(self, stream: Any) -> None:
        await stream.recv_message()
        info = pb.GetModelInfoResponse(max_context_length=MAX_CONTEXT, vocab_size=VOCAB)
        await stream.send_message(info)

    async def GetServerInfo(self, stream: Any) -> None:
        await stream.recv_message()
        await stream.send_message(pb.GetServerInfoResponse(server_type="fault-server"))

    async def _unimplemented(self, stream: Any) -> None:
        raise GRPCError(Status.UNIMPLEMENTED)

    Embed = FlushCache = StartProfile = StopProfile = GetLoads = _unimplemented
    GetTokenizer = SubscribeKvEvents = _unimplemented


@contextmanager
def serve_faulty_engine(
    behaviour: Behaviour, *, step_s: float = 0.002, tls: ssl.SSLContext | None = None
) -> Iterator[tuple[FaultyVllmEngine, int]]:
    """Run the server on 127.0.0.1 (a free port) in a thread; yield (servicer, port)."""
    servicer = FaultyVllmEngine(behaviour, step_s)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fault-server")
    thread.start()

    async def start() -> Server:
        server = Server([servicer])  # binds itself to the running loop
        await server.start("127.0.0.1", 0, ssl=tls)
        return server

    async def stop(server: Server) -> None:
        server.close()
        await server.wait_closed()

    try:
        server = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=5)
        try:
            listener = cast(asyncio.Server, server._server)
            port: int = listener.sockets[0].getsockname()[1]
            yield servicer, port
        finally:
            asyncio.run_coroutine_threadsafe(stop(server), loop).result(timeout=5)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
