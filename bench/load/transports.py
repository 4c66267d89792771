"""I/O. How the load generator sends one streaming request and meters its chunks, per transport:

- `h2c`: our HTTP/2 client, N connections opened up front, each request on the connection with
  the fewest open streams (many streams per connection);
- `http1`: HTTP/1.1 keep-alive connections, one request at a time each (as `vllm bench serve`);
- `ws`: the gateway's multiplexed WebSocket (`smg_trio.client`), N sockets, round robin;
- `direct`: no gateway and no HTTP: our ZMQ backend in this process drives the engine, with the
  request prepared (templated, tokenized, finalized) before the clock starts.

Request bodies are encoded before the run, so the client's per-request cost is parsing only.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Final, Literal, Protocol, assert_never

import msgspec
import trio

from bench.load.h2c_client import H2cConnection, open_h2c_connection
from bench.load.http1_client import Http1Connection
from bench.load.stats import StreamMeter
from bench.load.workload import ENDPOINT_PATHS, Endpoint, RequestSpec, request_body
from smg_trio.backends.zmq_backend import ZmqBackend
from smg_trio.client import GatewayClient, open_gateway_client
from smg_trio.core.finalize import Finalized, WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan, StopSpec
from smg_trio.model.folder import ModelDir
from smg_trio.neutral.events import ChoiceFinished, TokenDelta
from smg_trio.neutral.runtime import Endpoint as PlanEndpoint
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.neutral.sampling import SamplingParams

TransportName = Literal["h2c", "http1", "ws", "direct"]
TRANSPORTS: Final[tuple[TransportName, ...]] = ("h2c", "http1", "ws", "direct")
_decode_chunk = msgspec.json.Decoder(dict[str, Any]).decode


class RequestFailed(Exception):
    """A non-200 answer or an error in the stream."""


class Transport(Protocol):
    async def send(self, spec: RequestSpec, meter: StreamMeter) -> None:
        """Send one request, feed `meter` every chunk as it arrives, return at the end."""
        ...


class RequestBodies:
    """Every request's JSON body, encoded once before the run."""

    def __init__(
        self,
        specs: Sequence[RequestSpec],
        *,
        model: str,
        endpoint: Endpoint,
        stops: Sequence[str],
        ignore_eos: bool,
    ) -> None:
        self.path = ENDPOINT_PATHS[endpoint]
        self._bodies = {
            spec.index: msgspec.json.encode(
                request_body(
                    spec, model=model, endpoint=endpoint, stops=stops, ignore_eos=ignore_eos
                )
            )
            for spec in specs
        }

    def __getitem__(self, spec: RequestSpec) -> bytes:
        return self._bodies[spec.index]


class SseReader:
    """SSE bytes in; each `data:` payload decoded and handed to the meter. True at `[DONE]`."""

    def __init__(self, meter: StreamMeter) -> None:
        self._meter = meter
        self._pending = b""
        self.done = False

    def feed(self, data: bytes) -> None:
        self._pending += data
        *events, self._pending = self._pending.replace(b"\r\n", b"\n").split(b"\n\n")
        now = trio.current_time()
        for event in events:
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue  # comments (keep-alives), event names
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    self.done = True
                else:
                    self._meter.on_chunk(_decode_chunk(payload), now)


def _check_ended(reader: SseReader, meter: StreamMeter, status: int, body_head: bytes) -> None:
    if status != 200:
        raise RequestFailed(f"HTTP {status}: {body_head[:200]!r}")
    if meter.error is None and not reader.done:
        raise RequestFailed("the stream ended without [DONE]")


class H2cTransport:
    def __init__(self, connections: Sequence[H2cConnection], bodies: RequestBodies) -> None:
        self._connections = connections
        self._bodies = bodies

    async def send(self, spec: RequestSpec, meter: StreamMeter) -> None:
        connection = min(self._connections, key=lambda c: c.open_streams)
        reader = SseReader(meter)
        head = b""
        async with connection.post(self._bodies.path, self._bodies[spec]) as response:
            status = await response.status()
            async for data in response:
                if status == 200:
                    reader.feed(data)
                else:
                    head += data
        _check_ended(reader, meter, status, head)


class Http1Transport:
    """Idle keep-alive connections are reused; a new one is opened when none is idle (so at
    most one per concurrent request). A request that does not end cleanly closes its own."""

    def __init__(self, host: str, port: int, bodies: RequestBodies) -> None:
        self._host, self._port = host, port
        self._bodies = bodies
        self._idle: list[Http1Connection] = []

    async def send(self, spec: RequestSpec, meter: StreamMeter) -> None:
        if self._idle:
            connection = self._idle.pop()
        else:
            connection = await Http1Connection.connect(self._host, self._port)
        reader = SseReader(meter)
        head = bytearray()

        def on_data(status: int, data: bytes) -> None:
            if status == 200:
                reader.feed(data)
            else:
                head.extend(data)

        try:
            status = await connection.post(self._bodies.path, self._bodies[spec], on_data=on_data)
        finally:
            if connection.usable:
                self._idle.append(connection)
            else:
                with trio.CancelScope(shield=True):
                    await connection.aclose()
        _check_ended(reader, meter, status, bytes(head))

    async def aclose(self) -> None:
        for connection in self._idle:
            await connection.aclose()
        self._idle.clear()


class WebSocketTransport:
    def __init__(self, clients: Sequence[GatewayClient], bodies: RequestBodies) -> None:
        self._clients = itertools.cycle(clients)
        self._bodies = bodies

    async def send(self, spec: RequestSpec, meter: StreamMeter) -> None:
        client = next(self._clients)
        body = msgspec.Raw(self._bodies[spec])
        async with client.stream(self._bodies.path, body) as stream:
            async for chunk in stream:
                meter.on_chunk(chunk, trio.current_time())
        if stream.usage is not None and isinstance(stream.usage.get("completion_tokens"), int):
            meter.usage_tokens = stream.usage["completion_tokens"]


class DirectTransport:
    """Our ZMQ backend in this process; requests finalized for the vLLM ZMQ wire up front."""

    def __init__(
        self,
        backend: ZmqBackend,
        model: ModelDir,
        specs: Sequence[RequestSpec],
        *,
        stops: Sequence[str],
        ignore_eos: bool,
    ) -> None:
        self._backend = backend
        self._requests: Mapping[int, Finalized] = {
            spec.index: self._finalize(spec, model, stops, ignore_eos) for spec in specs
        }

    def _finalize(
        self, spec: RequestSpec, model: ModelDir, stops: Sequence[str], ignore_eos: bool
    ) -> Finalized:
        plan = GeneratePlan(
            request_id=f"direct-{spec.index}",
            endpoint=PlanEndpoint.COMPLETION,
            model=model.served_name,
            prompt_ids=tuple(model.tokenizer.encode(spec.prompt, add_special_tokens=True)),
            sampling=SamplingParams(
                temperature=0.0, max_tokens=spec.max_tokens, ignore_eos=ignore_eos
            ),
            stream=True,
            stop_spec=StopSpec(strings=tuple(stops)),
        )
        target = WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ, eos_ids=model.eos_ids)
        return finalize(plan, target, model.tokenizer)

    async def send(self, spec: RequestSpec, meter: StreamMeter) -> None:
        tokens = 0
        async with self._backend.open_stream(self._requests[spec.index]) as events:
            async for event in events:
                now = trio.current_time()
                match event:
                    case TokenDelta(token_ids=token_ids):
                        if token_ids:
                            tokens += len(token_ids)
                            meter.on_output(now)
                    case ChoiceFinished(finish_reason=reason):
                        meter.finish = str(reason)
                    case _:
                        assert_never(event)
        meter.usage_tokens = tokens


@asynccontextmanager
async def open_http_transport(
    kind: Literal["h2c", "http1", "ws"],
    host: str,
    port: int,
    bodies: RequestBodies,
    *,
    connections: int,
) -> AsyncIterator[Transport]:
    """Connections opened before the run (HTTP/1.1: as requests need them)."""
    async with AsyncExitStack() as stack:
        transport: Transport
        match kind:
            case "h2c":
                opened = [
                    await stack.enter_async_context(open_h2c_connection(host, port))
                    for _ in range(connections)
                ]
                transport = H2cTransport(opened, bodies)
            case "http1":
                http1 = Http1Transport(host, port, bodies)
                stack.push_async_callback(http1.aclose)
                transport = http1
            case "ws":
                url = f"ws://{host}:{port}/v1/ws"
                clients = [
                    await stack.enter_async_context(open_gateway_client(url))
                    for _ in range(connections)
                ]
                transport = WebSocketTransport(clients, bodies)
            case _:
                assert_never(kind)
        yield transport
