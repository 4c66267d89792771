"""I/O. The ZMQ backend's engines: which exist and are ready, their utility calls, and what a
handshake message, a registration or an engine death does to them. The engine requests in flight
are its `InFlightTable` (in_flight.py); what an output message does is the output reader's
(zmq_outputs.py); the slots themselves are zmq_engines.py's.

Every method is synchronous, so the output reader applies a whole message without yielding and
never waits on a request; trio is used only for its events.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Callable, Sequence

import trio

from smg_trio.backends.base import EngineStatus
from smg_trio.backends.declared_model import DeclaredModel
from smg_trio.backends.in_flight import InFlightTable
from smg_trio.backends.zmq_codec import decode_registration
from smg_trio.backends.zmq_engines import EngineSlot, PendingCall, RankPolicy, Route
from smg_trio.errors import BackendError, BackendProtocolError, EngineDead
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire.zmq_transport import (
    HELLO,
    READY,
    decode_handshake,
    engine_identity,
    engine_index_of,
)

logger = logging.getLogger(__name__)


class EngineRegistry:
    """The engines of one socket set, by index. See the module doc."""

    def __init__(self, engine_count: int, rank_policy: RankPolicy) -> None:
        self.engines = tuple(EngineSlot(i, engine_identity(i)) for i in range(engine_count))
        self.in_flight: InFlightTable[EngineSlot, Route] = InFlightTable(self.engines)
        self.calls: dict[int, PendingCall] = {}
        self.readiness_changed = trio.Event()
        self.protocol_errors = 0
        self._rank_policy = rank_policy
        self._rotation = itertools.count()
        self.strays: dict[int, set[str]] | None = None
        """One of several processes (docs/processes.md §3): by engine index, the running ids
        whose outputs came here though no stream of ours holds them (a killed predecessor's
        requests, or ours just aborted): to abort. None: not collected (one process)."""
        self.on_revived: Callable[[EngineSlot, list[str]], None] = lambda _engine, _ids: None
        """Told the ids to abort on an engine that answered again after going silent."""
        self.declared: DeclaredModel | None = None
        """The model this worker was declared for: an engine showing another is refused."""

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
            # A HELLO is hearing from it: a probe its dead predecessor left unanswered must not
            # count against the new process (docs/resilience.md §2).
            self.in_flight.heard_from(engine, trio.current_time())
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
        engine.media.clear()  # a (re)started engine holds no image
        logger.info("engine %d registered: %s", engine.index, engine.registration)
        self._refuse_another_model(engine)
        self.notify_readiness()

    def _refuse_another_model(self, engine: EngineSlot) -> None:
        """Out for good (until it says HELLO again) if it shows another model than declared."""
        declared, registration = self.declared, engine.registration
        if declared is None or registration is None:
            return
        refusal = declared.refusal(max_model_len=registration.max_model_len)
        if refusal is not None:
            engine.dead_reason = f"refused: {refusal}"
            logger.error("engine %d refused: %s", engine.index, refusal)

    def on_client_registration(self, runtime: Runtime, frames: Sequence[bytes]) -> bool:
        """One of several processes (no handshake socket here, docs/processes.md §3): the
        registration is the engine's HELLO and READY; a second one is a restarted engine.
        True when it was applied."""
        try:
            engine = self.engine_of(frames, "registration")
            registration = decode_registration(runtime, frames[1])
        except BackendProtocolError as exc:
            self.protocol_error(exc)
            return False
        if engine.said_hello:
            self.engine_died(engine, "it registered again (restarted)")
        engine.restart()
        engine.registration, engine.said_ready = registration, True
        self.in_flight.heard_from(engine, trio.current_time())
        logger.info("engine %d registered: %s", engine.index, registration)
        self._refuse_another_model(engine)
        self.notify_readiness()
        return True

    def recover(self, runtime: Runtime, engine_index: int, payload: bytes) -> None:
        """A restarted process: the registration a sibling kept; ready once the engine answers."""
        if not 0 <= engine_index < len(self.engines):
            return
        try:
            registration = decode_registration(runtime, payload)
        except BackendProtocolError as exc:
            self.protocol_error(exc)
            return
        engine = self.engines[engine_index]
        engine.restart()
        engine.registration, engine.awaiting_answer = registration, True
        logger.info("engine %d: registration recovered; waiting for its answer", engine_index)
        self._refuse_another_model(engine)

    def answered(self, engine: EngineSlot) -> None:
        """An engine this restarted process only knew from a sibling answered: ready here."""
        engine.awaiting_answer, engine.said_ready = False, True
        logger.info("engine %d answers this process; ready", engine.index)
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
                in_flight=self.in_flight.count(engine),
                version="" if engine.registration is None else engine.registration.version,
                dead_reason=engine.dead_reason,
                load=engine.load,
                prefix_cache=engine.prefix_cache,
            )
            for engine in self.engines
        )

    def engine_died(self, engine: EngineSlot, reason: str, *, revivable: bool = False) -> None:
        """Fail its streams and calls with EngineDead; it is out until it says HELLO again or,
        if `revivable` (dead by silence: the process may only be stalled), until it answers a
        probe (docs/resilience.md §3)."""
        if engine.awaiting_answer:
            return  # not reconnected yet, or gone: either way nothing of ours runs there
        if engine.dead_reason is not None or not engine.said_hello:
            if not revivable:
                engine.revivable = False  # e.g. its connection is gone too
            return
        engine.dead_reason = reason
        engine.revivable = revivable
        engine.media.clear()  # whatever comes back may hold none of our images
        logger.error("engine %d is dead: %s", engine.index, reason)
        message = f"engine {engine.index} is dead: {reason}"
        failed = self.in_flight.fail_engine(engine, message)
        if revivable:
            engine.abandoned = [route.engine_request_id for route in failed if route.add_sent]
        for call in self.calls.values():
            if call.engine is engine:
                call.settle(error=EngineDead(message))
        self.notify_readiness()

    def revive(self, engine: EngineSlot) -> None:
        """A silent engine spoke again: back in rotation; what it was given up on is aborted."""
        logger.warning(
            "engine %d answers again after %s; taken back", engine.index, engine.dead_reason
        )
        engine.dead_reason, engine.revivable = None, False
        abandoned, engine.abandoned = engine.abandoned, []
        self.on_revived(engine, abandoned)
        self.notify_readiness()

    def begin_call(self, engine: EngineSlot) -> tuple[int, PendingCall]:
        """Register a utility call to `engine` under a fresh call id."""
        call_id = secrets.randbits(63)
        while call_id in self.calls:
            call_id = secrets.randbits(63)
        self.in_flight.call_started(engine)  # a silent engine fails its pending calls too
        self.calls[call_id] = call = PendingCall(engine)
        return call_id, call

    def end_call(self, call_id: int) -> None:
        self.in_flight.call_ended(self.calls.pop(call_id).engine)

    def fail_calls(self, error: BaseException) -> None:
        """Shutdown: every pending utility call raises `error`."""
        for call in self.calls.values():
            call.settle(error=error)

    # --- ranks ------------------------------------------------------------------------------

    def pick_engine(self, ready: Sequence[EngineSlot], planned: dict[int, int]) -> EngineSlot:
        """A rank for one more engine request; `planned` counts this stream's earlier choices."""
        start = next(self._rotation) % len(ready)
        rotated = [*ready[start:], *ready[:start]]
        if self._rank_policy is RankPolicy.ROUND_ROBIN:
            return rotated[0]
        count = self.in_flight.count
        return min(rotated, key=lambda engine: count(engine) + planned.get(engine.index, 0))
