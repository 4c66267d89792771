"""I/O. What the ZMQ backend's output reader does with a batch of engine messages: decode each,
apply it to its engine (heard from, revived, load and prefix-cache counts, a utility reply) and
to the engine requests it carries (tokens, finishes, image cache misses), hand the batch to the
requests parked for it, then queue what the batch asks to send (ADDs again with their images,
ABORTs for strays).

Synchronous: a whole batch is applied without yielding and never waits on a request. Which
engines exist and what their deaths do is the registry's (zmq_registry.py); which stream an
engine request feeds is the in-flight table's (in_flight.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from smg_trio.backends import zmq_codec
from smg_trio.backends.event_stream import InlineBatches
from smg_trio.backends.zmq_codec import OutputMessage, RequestStep
from smg_trio.backends.zmq_engines import EngineSlot, Route
from smg_trio.backends.zmq_input_writer import Outgoing
from smg_trio.backends.zmq_registry import EngineRegistry
from smg_trio.errors import BackendProtocolError, EngineRejected
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire.zmq_transport import RequestType, encode_abort, is_engine_dead


class OutputReader:
    """Applies the output socket's batches; `send` queues a message on the input socket."""

    def __init__(
        self,
        runtime: Runtime,
        registry: EngineRegistry,
        inline: InlineBatches,
        send: Callable[[Outgoing], None],
    ) -> None:
        self._runtime = runtime
        self._registry = registry
        self._inline = inline
        self._send = send
        self.resends: list[tuple[EngineSlot, list[bytes]]] = []
        """ADDs to send again with their images' data (a cache miss), after the batch."""

    def apply(self, batch: Sequence[list[bytes]], now: float) -> None:
        """One read's messages, at trio time `now`."""
        registry = self._registry
        for frames in batch:
            if is_engine_dead(frames):
                for engine in registry.engines:
                    registry.engine_died(engine, "it sent ENGINE_CORE_DEAD")
                continue
            try:
                message = zmq_codec.decode_output(self._runtime, frames)
            except BackendProtocolError as exc:
                registry.protocol_error(exc)
                continue
            self.dispatch(message, now)
        self._inline.flush()  # the read's batches to the requests parked for them
        if self.resends:  # cache misses: the same ADDs again, with their images
            for engine, frames in self.resends:
                self._send(Outgoing(engine, frames))
            self.resends.clear()
        if registry.strays:  # once per batch; only ever with several processes
            for engine, frames in self._stray_aborts():
                self._send(Outgoing(engine, frames))

    def dispatch(self, message: OutputMessage, now: float) -> None:
        """Apply one output message: resolve a utility reply, deliver steps to their streams."""
        registry = self._registry
        in_flight = registry.in_flight
        heard: EngineSlot | None = None  # the engine marked heard from below (once per message)
        if 0 <= message.engine_index < len(registry.engines):
            engine = heard = registry.engines[message.engine_index]
            in_flight.heard_from(engine, now)
            if engine.revivable:  # once per message, never per token
                registry.revive(engine)
            elif engine.awaiting_answer and engine.probe_delivered:
                registry.answered(engine)
            if message.load is not None:
                engine.load = message.load
            counts = message.prefix_cache  # deltas: summed here, exported as counters
            if counts is not None:
                summed = engine.prefix_cache
                engine.prefix_cache = counts if summed is None else summed.plus(counts)
        if message.utility is not None:
            call = registry.calls.get(message.utility.call_id)
            if call is not None:
                failure = message.utility.failure
                call.settle(
                    value=message.utility.value,
                    error=None if failure is None else EngineRejected(failure),
                )
        strays = registry.strays
        requests = in_flight.requests
        advance = self._advance
        for step in message.steps:  # one loop, in the engine's order
            route = requests.get(step.request_id)
            if route is None:  # aborted, failed or not ours: dropped
                if strays is not None and (
                    not isinstance(step, RequestStep) or step.finish_reason is None
                ):
                    strays.setdefault(message.engine_index, set()).add(step.request_id)
                continue
            if route.engine is not heard:
                in_flight.heard_from(route.engine, now)
            if isinstance(step, RequestStep):
                advance(route, step)
            elif step.new_token_ids:  # plain token ids: no object made (the fast lane)
                route.deliver_tokens(step.new_token_ids, None)

    def _stray_aborts(self) -> list[tuple[EngineSlot, list[bytes]]]:
        """The ABORT frames for the strays collected so far (then forgotten): a killed
        predecessor's requests would otherwise run to their end (docs/processes.md §3). Aborts
        are idempotent, so re-aborting an id we had just aborted costs one frame."""
        strays, engines = self._registry.strays, self._registry.engines
        frames = []
        for index, ids in (strays or {}).items():
            if 0 <= index < len(engines):
                engine = engines[index]
                abort = encode_abort(sorted(ids))
                frames.append((engine, [engine.identity, RequestType.ABORT.frame, abort]))
        if strays:
            strays.clear()
        return frames

    def _advance(self, route: Route, step: RequestStep) -> None:
        if step.prompt_logprobs is not None:
            route.prompt_logprobs = step.prompt_logprobs
        if step.token_ids:
            route.deliver_tokens(step.token_ids, step.logprobs)
        if step.prompt_tokens is not None:
            route.prompt_tokens = step.prompt_tokens
        if step.completion_tokens is not None:
            route.completion_tokens = step.completion_tokens
        if step.cached_tokens is not None:
            route.cached_tokens = step.cached_tokens
        if step.cache_creation_tokens is not None:
            route.cache_creation_tokens = step.cache_creation_tokens
        if step.pooled is not None:
            route.pooled = step.pooled
        if step.finish_reason is not None:
            if step.cache_miss and route.full_add is not None and not route.completion_tokens:
                # vLLM's cache miss: its receiver lost an image we sent as nil. Once, with data.
                route.engine.media.forget(step.cache_miss)
                self.resends.append((route.engine, [route.engine.identity, *route.full_add]))
                route.full_add = None
                return
            failure = step.error or f"finish reason {step.finish_reason!r}"
            self._registry.in_flight.end_choice(
                route,
                step.finish_reason,
                step.stop_reason,
                failure=failure,
                weight_version=step.weight_version,
            )
