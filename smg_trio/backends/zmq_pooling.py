"""I/O. Pooling requests over vLLM's ZMQ wire (docs/pooling.md §2): one ADD per input, its
one result read from the finishing output, and an ABORT when the caller leaves first.

A pooling request rides the same in-flight table as a generation choice (in_flight.py): it is
one `Route` on one engine with a stream of its own, so an engine's death, its silence and the
backend's shutdown fail it as they fail a stream, and leaving `pool` for any reason
(cancellation included) before the engine finished aborts it, shielded and bounded by
`ABORT_GRACE_S`. The registry keeps the finishing output's tensor on the route
(`Route.pooled`); `pool` returns it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import trio

from smg_trio.backends import zmq_codec
from smg_trio.backends.zmq_engines import Route
from smg_trio.backends.zmq_input_writer import InputWriter, Outgoing
from smg_trio.backends.zmq_registry import EngineRegistry
from smg_trio.errors import BackendProtocolError, BackendUnavailable
from smg_trio.neutral.pooling import PooledOutput, PoolingRequest
from smg_trio.neutral.runtime import Runtime

Abort = Callable[[Sequence[Route], Sequence[Route]], Awaitable[None]]


@dataclass(frozen=True)
class ZmqPooler:
    """The pooling half of a `ZmqBackend`: its registry, writer and abort, shared."""

    runtime: Runtime
    registry: EngineRegistry
    writer: InputWriter
    abort: Abort
    vocab_size: int | None
    client_index: int

    async def pool(self, request: PoolingRequest) -> PooledOutput:
        """One engine request for `request`; its tensor (see the module doc)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        route = self._start(request)
        in_flight = self.registry.in_flight
        async with in_flight.hold(route.stream, [route], self.abort) as events:
            async for _ in events:  # the one ChoiceFinished; failures raise here
                pass
        if route.pooled is None:
            raise BackendProtocolError(
                f"the engine finished pooling request {route.engine_request_id} without a tensor"
            )
        values, shape = route.pooled
        return PooledOutput(values=values, shape=shape, prompt_tokens=len(request.prompt_ids))

    def _start(self, request: PoolingRequest) -> Route:
        """Encode the ADD (a ClientError leaves nothing behind), then register and send it."""
        registry = self.registry
        in_flight = registry.in_flight
        in_flight.check_open()
        ready = registry.ready_engines()
        if not ready:
            raise BackendUnavailable(registry.unready_reason())
        engine = registry.pick_engine(ready, {})
        assert engine.registration is not None  # it is ready
        engine_request_id = in_flight.new_engine_request_id(request.request_id, ())
        frames = zmq_codec.encode_pooling_add(
            self.runtime,
            request,
            engine_request_id=engine_request_id,
            max_model_len=engine.registration.max_model_len,
            vocab_size=self.vocab_size,
            arrival_time=time.time(),
            client_index=self.client_index,
        )
        route = Route(
            engine_request_id=engine_request_id,
            choice_index=request.input_index,
            engine=engine,
            stream=in_flight.new_stream((engine_request_id,)),
            prompt_tokens=len(request.prompt_ids),
        )
        in_flight.add(route)
        self.writer.send_adds([Outgoing(engine, [engine.identity, *frames], add_for=route)])
        return route
