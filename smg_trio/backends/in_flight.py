"""I/O. The engine requests in flight of one backend, whatever its wire (ZMQ or gRPC): where an
engine request id is allocated, which open stream and choice each id feeds, when a stream ends,
what is aborted when a stream is left early, what an engine's death fails, and what the silence
watchdog measures.

A backend keeps one `InFlightTable` and only its wire's I/O. It builds its requests (`InFlight`
subclasses carrying the wire's own state), registers them with `add`, turns what the engine
sends into `deliver_tokens` / `end_choice` / `fail` calls, and hands `hold` and `close` a
`Leave` coroutine that aborts requests on the engine; `serving` runs its tasks and the
watchdog for the backend's lifetime. Everything but `serving`, `hold`, `close` and
`watch_silence` is synchronous, so an engine message is applied without yielding.

Invariants: an id is in `requests` exactly while its choice has neither finished, failed nor
been given up, and its engine's count includes it; a stream ends once every one of its choices
finished; a finished choice is never aborted.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Hashable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Generic, TypeAlias, TypeVar

import trio

from smg_trio.backends.event_stream import EngineEventStream, InlineBatches
from smg_trio.core.finalize import Finalized
from smg_trio.errors import BackendUnavailable, EngineDead, EngineRejected, UnsupportedRuntime
from smg_trio.neutral.events import ChoiceFinished, TokenDelta, TokenLogprob
from smg_trio.neutral.runtime import Runtime, Wire

logger = logging.getLogger(__name__)

ABORT_GRACE_S: Final = 1.0
"""How long leaving a stream waits (shielded) for the wire to abort its unfinished requests."""
WATCHDOG_PERIOD_S: Final = 300.0
"""Default silence, with work in flight, after which an engine is declared dead (as smg)."""
ENGINE_SILENCE_S: Final = 30.0
"""Default silence after which an engine is dead when a request waits for its first token or a
liveness probe waits for its answer: a live engine answers probes between steps, so only a
wedged one stays this quiet (docs/resilience.md §2)."""
_WATCHDOG_CHECKS_PER_PERIOD: Final = 10  # detection lands within 110 % of the period
_CLIENT_FINISHES: Final = {"stop": "stop", "length": "length", "tool_calls": "stop"}

E = TypeVar("E", bound=Hashable)
"""One engine: a data-parallel rank (ZMQ) or the one engine behind a gRPC address."""


@dataclass(eq=False, kw_only=True)
class InFlight(Generic[E]):
    """One engine request: one choice of an open stream, on one engine."""

    engine_request_id: str
    choice_index: int
    engine: E
    stream: EngineEventStream
    prompt_tokens: int
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_creation_tokens: int | None = None  # None: the engine does not report it
    live: bool = True
    """Neither finished, failed nor given up: leaving its stream must abort it."""
    prompt_logprobs: tuple[TokenLogprob, ...] | None = None
    """Prompt logprobs received and not yet delivered: they ride on the next token delta."""

    def deliver_tokens(
        self, token_ids: tuple[int, ...], logprobs: tuple[TokenLogprob, ...] | None
    ) -> None:
        self.completion_tokens += len(token_ids)
        prompt = self.prompt_logprobs
        if logprobs is None and prompt is None:  # the common case: the stream's fast lane
            self.stream.deliver_tokens(self.choice_index, token_ids)
            return
        self.prompt_logprobs = None
        self.stream.deliver(TokenDelta(self.choice_index, token_ids, logprobs, prompt))


R = TypeVar("R", bound=InFlight[Any])

Leave: TypeAlias = Callable[[Sequence[R], Sequence[R]], Awaitable[None]]
"""The wire's abort: `leave(given_up, unfinished)` gets every request of what is being left
(a finished one's call may still be ending on the wire) and the unfinished ones, already out of
the table, to abort on their engines. It runs shielded, bounded by `ABORT_GRACE_S`."""


@dataclass(eq=False)
class _Activity:
    """What the silence watchdog knows of one engine."""

    requests: int = 0
    calls: int = 0  # other work awaiting an answer (ZMQ utility calls)
    heard_at: float = 0.0  # trio clock: its last output, or when it last became busy
    probe_sent_at: float = float("-inf")  # the oldest liveness probe not answered since

    @property
    def busy(self) -> bool:
        return self.requests > 0 or self.calls > 0


class InFlightTable(Generic[E, R]):
    """The requests in flight on `engines`, by engine request id. See the module doc."""

    def __init__(self, engines: Sequence[E]) -> None:
        self.requests: dict[str, R] = {}
        self.open_streams = 0
        self.engine_deaths = 0  # `fail_engine` calls so far (docs/observability.md §1)
        self._activity = {engine: _Activity() for engine in engines}
        self._closed_reason: str | None = None

    @asynccontextmanager
    async def serving(
        self,
        background: Sequence[Callable[[], Awaitable[None]]],
        *,
        watchdog_period_s: float,
        engine_silent: Callable[[E, str], None],
        shut_down: Callable[[], Awaitable[None]],
        engine_silence_s: float | None = None,
    ) -> AsyncIterator[None]:
        """The backend's lifetime: its `background` tasks (socket owners, health checks) and the
        silence watchdog run for the block. On leaving, `shut_down()` (which `close`s this table)
        runs first, while the wire's tasks can still send the aborts; then they stop."""
        async with trio.open_nursery() as nursery:
            for task in background:
                nursery.start_soon(task)
            nursery.start_soon(
                partial(
                    self.watch_silence,
                    watchdog_period_s,
                    engine_silent,
                    engine_silence_s=engine_silence_s,
                )
            )
            try:
                yield
            finally:
                await shut_down()
                nursery.cancel_scope.cancel()

    # --- opening a stream -------------------------------------------------------------------

    def admit(self, finalized: Finalized, runtime: Runtime, wire: Wire) -> None:
        """Raise unless `finalized` was shaped for this backend and it is not shutting down."""
        if finalized.runtime is not runtime or finalized.wire is not wire:
            raise UnsupportedRuntime(
                f"the request was shaped for {finalized.runtime.value} over "
                f"{finalized.wire.value}; this backend is {runtime.value} over {wire.value}"
            )
        self.check_open()

    def check_open(self) -> None:
        """Raise `BackendUnavailable` once the backend is shutting down."""
        if self._closed_reason is not None:
            raise BackendUnavailable(self._closed_reason)

    def new_engine_request_id(self, request_id: str, planned: Collection[str]) -> str:
        """The client's id plus a random suffix (as vLLM's frontend does), unique among the ids
        in flight and `planned`, so a client id never collides with one in flight."""
        while True:
            candidate = f"{request_id}-{secrets.token_hex(4)}"
            if candidate not in self.requests and candidate not in planned:
                return candidate

    @staticmethod
    def new_stream(
        engine_request_ids: tuple[str, ...], inline: InlineBatches | None = None
    ) -> EngineEventStream:
        """The stream of these ids, one per choice in choice order; none means already ended.
        `inline`: the reader's, when one task reads every output and flushes it after a read."""
        stream = EngineEventStream(engine_request_ids, inline)
        if not engine_request_ids:
            stream.end()
        return stream

    def add(self, request: R) -> None:
        activity = self._activity[request.engine]
        self._mark_busy(activity)
        activity.requests += 1
        self.requests[request.engine_request_id] = request

    @asynccontextmanager
    async def hold(
        self, stream: EngineEventStream, requests: Sequence[R], leave: Leave[R]
    ) -> AsyncIterator[EngineEventStream]:
        """Yield `stream`. Leaving for ANY reason (break, exception, cancellation) fails it if
        it is still open, takes its unfinished requests out and has `leave` abort them."""
        self.open_streams += 1
        try:
            yield stream
        finally:
            self.open_streams -= 1
            if not stream.closed:
                stream.fail(trio.ClosedResourceError("the stream was left"))
            await self._give_up(requests, [request for request in requests if request.live], leave)

    async def close(self, reason: str, leave: Leave[R]) -> None:
        """Shutdown: refuse new streams, fail every open one with `BackendUnavailable(reason)`
        and have `leave` abort their requests."""
        self._closed_reason = reason
        requests = list(self.requests.values())
        for request in requests:
            request.stream.fail(BackendUnavailable(reason))
        await self._give_up(requests, requests, leave)

    async def _give_up(self, requests: Sequence[R], unfinished: list[R], leave: Leave[R]) -> None:
        for request in unfinished:
            self._forget(request)
        with trio.move_on_after(ABORT_GRACE_S, shield=True) as scope:
            await leave(requests, unfinished)
        if scope.cancelled_caught:
            ids = [request.engine_request_id for request in unfinished]
            logger.warning("aborting %s did not complete within %g s", ids, ABORT_GRACE_S)

    # --- what the engine says ---------------------------------------------------------------

    def heard_from(self, engine: E, now: float) -> None:
        """`engine` sent something at trio time `now`: it is not silent."""
        self._activity[engine].heard_at = now

    def end_choice(
        self,
        request: R,
        finish_reason: str,
        stop_reason: int | str | None,
        *,
        failure: str,
        weight_version: str | None = None,
    ) -> None:
        """The engine's terminal word on `request`: a stop or length finish ends the choice
        (with the engine's weight version, vLLM's, when it names one); "abort" and any other
        reason (`failure` says why) fail its stream."""
        client_finish = _CLIENT_FINISHES.get(finish_reason)
        if client_finish is None:
            if finish_reason == "abort":
                self.fail(request, EngineRejected("the engine aborted the request", status=503))
            else:
                self.fail(request, EngineRejected(failure))
            return
        self._forget(request)  # finished: never aborted
        stream = request.stream
        stream.deliver(
            ChoiceFinished(
                choice_index=request.choice_index,
                finish_reason=client_finish,
                stop_reason=stop_reason,
                prompt_tokens=request.prompt_tokens,
                completion_tokens=request.completion_tokens,
                cached_tokens=request.cached_tokens,
                weight_version=weight_version,
                cache_creation_tokens=request.cache_creation_tokens,
            )
        )
        if not any(
            (other := self.requests.get(engine_request_id)) is not None and other.stream is stream
            for engine_request_id in stream.engine_request_ids
        ):
            stream.end()

    def fail(self, request: R, error: BaseException) -> None:
        """`request` ended without finishing: its stream raises `error`."""
        self._forget(request)
        request.stream.fail(error)

    def fail_engine(self, engine: E, message: str) -> list[R]:
        """`engine` died: every stream with a request on it raises `EngineDead(message)`.
        Returns those requests (out of the table; nobody is listening to an abort)."""
        self.engine_deaths += 1
        requests = [request for request in self.requests.values() if request.engine == engine]
        for request in requests:
            self.fail(request, EngineDead(message))
        return requests

    def _forget(self, request: R) -> None:
        if request.live:
            request.live = False
            del self.requests[request.engine_request_id]
            self._activity[request.engine].requests -= 1

    # --- counts and the silence watchdog ----------------------------------------------------

    def count(self, engine: E) -> int:
        """Requests in flight on `engine`."""
        return self._activity[engine].requests

    def call_started(self, engine: E) -> None:
        """Other work (a utility call) now awaits `engine`'s answer: silence counts for it too."""
        activity = self._activity[engine]
        self._mark_busy(activity)
        activity.calls += 1

    def call_ended(self, engine: E) -> None:
        self._activity[engine].calls -= 1

    @staticmethod
    def _mark_busy(activity: _Activity) -> None:
        if not activity.busy:  # silence is only suspicious from the moment work was sent
            activity.heard_at = trio.current_time()

    def probe_sent(self, engine: E) -> None:
        """A liveness probe went to `engine`: unanswered, it counts as silence (docs/resilience.md §2)."""
        activity = self._activity[engine]
        if activity.probe_sent_at <= activity.heard_at:  # none outstanding: this one starts it
            activity.probe_sent_at = trio.current_time()

    def heard_at(self, engine: E) -> float:
        """Trio time of `engine`'s last output (or of when it last became busy)."""
        return self._activity[engine].heard_at

    async def watch_silence(
        self,
        period_s: float,
        engine_silent: Callable[[E, str], None],
        *,
        engine_silence_s: float | None = None,
    ) -> None:
        """Forever: report each engine that is silent too long to `engine_silent` with the
        reason (it declares the engine dead). Too long is `period_s` while it generates, and the
        shorter `engine_silence_s` (default `period_s`) while a request on it waits for its
        first token or a liveness probe waits for its answer (docs/resilience.md §2)."""
        short_s = period_s if engine_silence_s is None else min(engine_silence_s, period_s)
        while True:
            await trio.sleep(short_s / _WATCHDOG_CHECKS_PER_PERIOD)
            now = trio.current_time()
            for engine, activity in list(self._activity.items()):
                reason = self._silence(engine, activity, now, period_s, short_s)
                if reason is not None:
                    engine_silent(engine, reason)

    def _silence(
        self, engine: E, activity: _Activity, now: float, period_s: float, short_s: float
    ) -> str | None:
        """Why `engine` counts as dead by silence at `now`, or None."""
        if activity.busy:
            silent_s = now - activity.heard_at
            calls = f" and {activity.calls} calls" if activity.calls else ""
            if silent_s >= period_s:
                return (
                    f"no output for {period_s:g} s with {activity.requests} requests"
                    f"{calls} in flight"
                )
            # Scanned only once silent this long, so the token path pays nothing for it.
            if silent_s >= short_s and any(
                request.engine == engine and request.completion_tokens == 0
                for request in self.requests.values()
            ):
                return f"no output for {short_s:g} s while requests wait for their first token"
            return None
        if activity.probe_sent_at > activity.heard_at and now - activity.probe_sent_at >= short_s:
            return f"no answer to a liveness probe for {short_s:g} s"
        return None
