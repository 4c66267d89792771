"""I/O. Opening a ZMQ engine stream: every ADD of a finalized request encoded first (any
`ClientError` leaves nothing behind), a rank picked for each, the stream and its routes
registered in the in-flight table, then the ADDs queued on the input writer (docs/wire.md §A).

A repeated image goes as `data: nil` when this process is the engine's only client, with the
full ADD kept for one resend should the engine answer with a cache miss (docs/images.md §5).
"""

from __future__ import annotations

import time
from functools import partial

from smg_trio.backends import zmq_codec
from smg_trio.backends.event_stream import EngineEventStream, InlineBatches
from smg_trio.backends.zmq_engines import EngineSlot, Route
from smg_trio.backends.zmq_input_writer import InputWriter, Outgoing
from smg_trio.backends.zmq_registry import EngineRegistry
from smg_trio.core.finalize import Finalized
from smg_trio.errors import BackendUnavailable
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.neutral.sampling import EngineRequest


class StreamStarter:
    """Starts the streams of one ZMQ backend; `client_index` is stamped on every ADD."""

    def __init__(
        self,
        *,
        runtime: Runtime,
        registry: EngineRegistry,
        writer: InputWriter,
        inline: InlineBatches,
        vocab_size: int | None,
        client_index: int,
        one_client: bool,
    ) -> None:
        self._runtime = runtime
        self._registry = registry
        self._writer = writer
        self._inline = inline
        self._vocab_size = vocab_size
        self._client_index = client_index
        self._one_client = one_client  # the engine's image cache is ours alone

    def start(self, finalized: Finalized) -> tuple[EngineEventStream, list[Route]]:
        """Encode every ADD (any ClientError leaves nothing behind), then register and queue."""
        registry = self._registry
        in_flight = registry.in_flight
        in_flight.admit(finalized, self._runtime, Wire.ZMQ)
        ready = registry.ready_engines()
        if not ready:
            raise BackendUnavailable(registry.unready_reason())
        planned: dict[str, tuple[EngineRequest, EngineSlot, list[bytes], list[bytes] | None]] = {}
        load: dict[int, int] = {}
        arrival_time = time.time()
        for request in finalized.requests:
            engine = registry.pick_engine(ready, load)
            load[engine.index] = load.get(engine.index, 0) + 1
            engine_request_id = in_flight.new_engine_request_id(request.request_id, planned)
            assert engine.registration is not None  # it is ready
            encode = partial(
                zmq_codec.encode_add,
                self._runtime,
                request,
                engine_request_id=engine_request_id,
                max_model_len=engine.registration.max_model_len,
                vocab_size=self._vocab_size,
                arrival_time=arrival_time,
                client_index=self._client_index,
            )
            frames = encode()
            full_add = None
            held = self._held_media(engine, request)
            if held:  # repeats go as `data: nil`; the full ADD is kept for a cache miss
                full_add, frames = frames, encode(cached_media=held)
            engine.media.sent(request.media)
            planned[engine_request_id] = (request, engine, frames, full_add)
        stream = in_flight.new_stream(tuple(planned), self._inline)
        routes = []
        adds = []
        for engine_request_id, (request, engine, frames, full_add) in planned.items():
            route = Route(
                engine_request_id=engine_request_id,
                choice_index=request.choice_index,
                engine=engine,
                stream=stream,
                prompt_tokens=len(request.prompt_ids),
                full_add=full_add,
            )
            in_flight.add(route)
            routes.append(route)
            adds.append(Outgoing(engine, [engine.identity, *frames], add_for=route))
        self._writer.send_adds(adds)  # every route registered first: a failed send sees them
        return stream, routes

    def _held_media(self, engine: EngineSlot, request: EngineRequest) -> frozenset[str]:
        """The request's images `engine` holds, for vLLM with this process its only client
        (several processes would each mirror a cache they share: data is always sent)."""
        if not request.media or self._runtime is not Runtime.VLLM or not self._one_client:
            return frozenset()
        return engine.media.held(request.media)
