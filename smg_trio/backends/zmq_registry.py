"""I/O. The ZMQ backend's bookkeeping: which engines exist and are ready, which engine requests
are in flight for which open stream, and what a handshake message, a registration, an output
message, an engine death or a stream leaving does to them.

Every method is synchronous, so the output reader applies a whole message without yielding and
never waits on a request; trio is used only for its clock and events. Invariants: an engine
request id is in `routes` exactly while it has neither a terminal output nor been aborted, and
its engine's `in_flight` counts it; a stream ends once none of its ids is in `routes`.
"""

from __future__ import annotations

import enum
import itertools
import logging
import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from smg_trio.backends.base import EngineStatus
from smg_trio.backends.event_stream import EngineEventStream
from smg_trio.backends.zmq_codec import (
    OutputMessage,
    Registration,
    RequestStep,
    decode_registration,
)
from smg_trio.errors import BackendError, BackendProtocolError, EngineDead, EngineRejected
from smg_trio.neutral.events import ChoiceFinished, TokenDelta
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire.zmq_transport import (
    HELLO,
    READY,
    decode_handshake,
    engine_identity,
    engine_index_of,
)

logger = logging.getLogger(__name__)


class RankPolicy(enum.Enum):
    """How a data-parallel rank is chosen for each engine request."""

    LEAST_LOADED = "least_loaded"  # fewest requests in flight; ties rotate
    ROUND_ROBIN = "round_robin"


@dataclass(eq=False)
class EngineSlot:
    """One engine (data-parallel rank) behind the socket set, by its 2-byte identity."""

    index: int
    identity: bytes
    said_hello: bool = False
    said_ready: bool = False
    registration: Registration | None = None
    dead_reason: str | None = None
    in_flight: int = 0
    pending_calls: int = 0
    heard_at: float = 0.0  # trio clock: its last output, or when it last became busy

    @property
    def ready(self) -> bool:
        return self.said_ready and self.registration is not None and self.dead_reason is None

    @property
    def busy(self) -> bool:
        return self.in_flight > 0 or self.pending_calls > 0

    def restart(self) -> None:
        """A (new) engine process said HELLO with this identity."""
        self.said_hello, self.said_ready = True, False
        self.registration, self.dead_reason = None, None


@dataclass(eq=False)
class Route:
    """One engine request in flight: a choice of an open stream."""

    engine_request_id: str
    choice_index: int
    engine: EngineSlot
    stream: EngineEventStream
    prompt_tokens: int
    completion_tokens: int = 0
    cached_tokens: int = 0
    add_sent: bool = False  # the writer handed its ADD to libzmq: leaving must ABORT it


@dataclass(eq=False)
class PendingCall:
    engine: EngineSlot
    done: trio.Event = field(default_factory=trio.Event)
    value: Any = None
    error: BaseException | None = None

    def settle(self, *, value: Any = None, error: BaseException | None = None) -> None:
        if not self.done.is_set():
            self.value, self.error = value, error
            self.done.set()


class EngineRegistry:
    def __init__(self, engine_count: int, rank_policy: RankPolicy) -> None:
        self.engines = tuple(EngineSlot(i, engine_identity(i)) for i in range(engine_count))
        self.routes: dict[str, Route] = {}
        self.calls: dict[int, PendingCall] = {}
        self.readiness_changed = trio.Event()
        self.protocol_errors = 0
        self._rank_policy = rank_policy
        self._rotation = itertools.count()

    # --- engines ----------------------------------------------------------------------------

    def engine_of(self, frames: Sequence[bytes], what: str) -> EngineSlot:
        """The engine a `[identity, payload]` message came from."""
        if len(frames) != 2:
            raise BackendProtocolError(f"a {what} message has 2 frames, got {len(frames)}")
        index = engine_index_of(frames[0])
        if index >= len(self.engines):
            raise BackendProtocolError(f"{what} from unexpected engine {index}")
        return self.engines[index]

    def on_handshake(self, frames: Sequence[bytes]) -> EngineSlot | None:
        """Apply HELLO or READY; return the engine to send INIT to (after a HELLO)."""
        try:
            engine = self.engine_of(frames, "handshake")
            message = decode_handshake(frames[1])
        except BackendProtocolError as exc:
            self.protocol_error(exc)
            return None
        if message.status == HELLO:
            if engine.said_hello:
                self.engine_died(engine, "it said HELLO again (restarted)")
            engine.restart()
            logger.info("engine %d said HELLO", engine.index)
            return engine
        if message.status == READY and engine.said_hello:
            engine.said_ready = True
            self.notify_readiness()
        else:
            self.protocol_error(
                BackendProtocolError(f"engine {engine.index}: unexpected {message.status!r}")
            )
        return None

    def on_registration(self, runtime: Runtime, frames: Sequence[bytes]) -> None:
        """Apply the registration map an engine sends first on the input socket."""
        try:
            engine = self.engine_of(frames, "registration")
            if not engine.said_hello:
                raise BackendProtocolError(f"engine {engine.index} registered before HELLO")
            engine.registration = decode_registration(runtime, frames[1])
        except BackendProtocolError as exc:
            self.protocol_error(exc)
            return
        logger.info("engine %d registered: %s", engine.index, engine.registration)
        self.notify_readiness()

    def ready_engines(self) -> list[EngineSlot]:
        return [engine for engine in self.engines if engine.ready]

    def notify_readiness(self) -> None:
        self.readiness_changed.set()
        self.readiness_changed = trio.Event()

    def protocol_error(self, exc: BackendError) -> None:
        self.protocol_errors += 1
        logger.warning("dropped an engine message: %s", exc)

    def unready_reason(self) -> str:
        states = []
        for engine in self.engines:
            if engine.dead_reason is not None:
                states.append(f"engine {engine.index} is dead ({engine.dead_reason})")
            elif not engine.said_hello:
                states.append(f"engine {engine.index} has not connected")
            else:
                states.append(f"engine {engine.index} is starting")
        return "no ZMQ engine is ready: " + "; ".join(states)

    def statuses(self) -> tuple[EngineStatus, ...]:
        return tuple(
            EngineStatus(
                index=engine.index,
                ready=engine.ready,
                max_model_len=None
                if engine.registration is None
                else engine.registration.max_model_len,
                in_flight=engine.in_flight,
                version="" if engine.registration is None else engine.registration.version,
                dead_reason=engine.dead_reason,
            )
            for engine in self.engines
        )

    def engine_died(self, engine: EngineSlot, reason: str) -> None:
        """Fail its streams and calls with EngineDead; it is out until it says HELLO again."""
        if engine.dead_reason is not None or not engine.said_hello:
            return
        engine.dead_reason = reason
        logger.error("engine %d is dead: %s", engine.index, reason)
        message = f"engine {engine.index} is dead: {reason}"
        for route in [r for r in self.routes.values() if r.engine is engine]:
            self.forget(route)
            route.stream.fail(EngineDead(message))
        for call in self.calls.values():
            if call.engine is engine:
                call.settle(error=EngineDead(message))
        self.notify_readiness()

    def silent_engines(self, now: float, period_s: float) -> list[EngineSlot]:
        """Busy engines that said nothing for `period_s`."""
        return [
            engine
            for engine in self.engines
            if engine.dead_reason is None and engine.busy and now - engine.heard_at >= period_s
        ]

    def begin_call(self, engine: EngineSlot) -> tuple[int, PendingCall]:
        """Register a utility call to `engine` under a fresh call id."""
        call_id = secrets.randbits(63)
        while call_id in self.calls:
            call_id = secrets.randbits(63)
        self.mark_busy(engine)  # a silent engine fails its pending calls too
        self.calls[call_id] = call = PendingCall(engine)
        engine.pending_calls += 1
        return call_id, call

    def end_call(self, call_id: int) -> None:
        self.calls.pop(call_id).engine.pending_calls -= 1

    # --- routes -----------------------------------------------------------------------------

    def pick_engine(self, ready: Sequence[EngineSlot], planned: dict[int, int]) -> EngineSlot:
        """A rank for one more engine request; `planned` counts this stream's earlier choices."""
        start = next(self._rotation) % len(ready)
        rotated = [*ready[start:], *ready[:start]]
        if self._rank_policy is RankPolicy.ROUND_ROBIN:
            return rotated[0]
        return min(rotated, key=lambda engine: engine.in_flight + planned.get(engine.index, 0))

    def new_engine_request_id(self, request_id: str, taken: Collection[str]) -> str:
        """The client's id plus a random suffix, unique among in-flight ids (as vLLM does)."""
        while True:
            candidate = f"{request_id}-{secrets.token_hex(4)}"
            if candidate not in self.routes and candidate not in taken:
                return candidate

    def add(self, route: Route) -> None:
        self.mark_busy(route.engine)
        self.routes[route.engine_request_id] = route
        route.engine.in_flight += 1

    def mark_busy(self, engine: EngineSlot) -> None:
        if not engine.busy:  # silence is only suspicious from the moment work was sent
            engine.heard_at = trio.current_time()

    def forget(self, route: Route) -> None:
        del self.routes[route.engine_request_id]
        route.engine.in_flight -= 1

    def is_live(self, route: Route) -> bool:
        return self.routes.get(route.engine_request_id) is route

    def take_unfinished(self, stream: EngineEventStream) -> dict[EngineSlot, list[str]]:
        """Forget the stream's in-flight requests; return the ids to ABORT, by engine."""
        return self._take(self._routes_of(stream))

    def _routes_of(self, stream: EngineEventStream) -> list[Route]:
        routes = (self.routes.get(i) for i in stream.engine_request_ids)
        return [route for route in routes if route is not None and route.stream is stream]

    def take_all(self, error: BaseException) -> dict[EngineSlot, list[str]]:
        """Shutdown: fail every stream and call with `error`; return the ids to ABORT."""
        routes = list(self.routes.values())
        for route in routes:
            route.stream.fail(error)
        for call in self.calls.values():
            call.settle(error=error)
        return self._take(routes)

    def _take(self, routes: list[Route]) -> dict[EngineSlot, list[str]]:
        ids_by_engine: dict[EngineSlot, list[str]] = {}
        for route in routes:
            self.forget(route)
            if route.add_sent and route.engine.dead_reason is None:
                ids_by_engine.setdefault(route.engine, []).append(route.engine_request_id)
        return ids_by_engine

    # --- outputs ----------------------------------------------------------------------------

    def dispatch(self, message: OutputMessage, now: float) -> None:
        """Apply one output message: resolve a utility reply, deliver steps to their streams."""
        if 0 <= message.engine_index < len(self.engines):
            self.engines[message.engine_index].heard_at = now
        if message.utility is not None:
            call = self.calls.get(message.utility.call_id)
            if call is not None:
                failure = message.utility.failure
                call.settle(
                    value=message.utility.value,
                    error=None if failure is None else EngineRejected(failure),
                )
        for step in message.steps:
            route = self.routes.get(step.request_id)
            if route is not None:  # else aborted, failed or not ours: dropped
                route.engine.heard_at = now
                self._advance(route, step)

    def _advance(self, route: Route, step: RequestStep) -> None:
        stream = route.stream
        if step.token_ids:
            route.completion_tokens += len(step.token_ids)
            stream.deliver(TokenDelta(route.choice_index, step.token_ids, step.logprobs))
        if step.prompt_tokens is not None:
            route.prompt_tokens = step.prompt_tokens
        if step.completion_tokens is not None:
            route.completion_tokens = step.completion_tokens
        if step.cached_tokens is not None:
            route.cached_tokens = step.cached_tokens
        if step.finish_reason is None:
            return
        self.forget(route)  # terminal: never aborted
        if step.finish_reason in ("stop", "length"):
            stream.deliver(
                ChoiceFinished(
                    choice_index=route.choice_index,
                    finish_reason=step.finish_reason,
                    stop_reason=step.stop_reason,
                    prompt_tokens=route.prompt_tokens,
                    completion_tokens=route.completion_tokens,
                    cached_tokens=route.cached_tokens,
                )
            )
            if not self._routes_of(stream):
                stream.end()
        elif step.finish_reason == "abort":
            stream.fail(EngineRejected("the engine aborted the request", status=503))
        else:
            stream.fail(EngineRejected(step.error or f"finish reason {step.finish_reason!r}"))
