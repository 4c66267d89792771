"""Pure. What every engine backend offers the request layer: the Backend protocol, the engine
events a stream yields, and the readiness/statistics snapshot used for validation and health.

A backend turns one `Finalized` (one engine request per choice) into a stream of events:

    async with backend.open_stream(finalized) as events:
        async for event in events:
            match event:
                case TokenDelta(): ...
                case ChoiceFinished(): ...
                case _: assert_never(event)

- Events of several choices (n > 1) interleave, each tagged with its `choice_index`; within a
  choice, a `TokenDelta` never follows that choice's `ChoiceFinished`. The iteration ends when
  every choice has finished.
- A choice the engine refused or failed raises `EngineRejected` (the engine's reason); an engine
  that died or went silent raises `EngineDead`; no ready engine at open time raises
  `BackendUnavailable`; a request the engine could not take raises `ClientError` at open time.
- Leaving the block for ANY reason (break, exception, cancellation) before every choice
  finished aborts the unfinished engine requests; a finished choice is never aborted.
- Deadlines belong to the caller (`trio.fail_at` around the block); nothing here waits without
  a bound other than the engine's own generation, which `max_tokens` bounds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Final, Protocol, runtime_checkable

import msgspec

from smg_trio.core.finalize import Finalized
from smg_trio.neutral.events import EngineEvent
from smg_trio.neutral.pooling import PooledOutput, PoolingRequest
from smg_trio.neutral.runtime import Runtime, Wire


class EngineLoad(msgspec.Struct, frozen=True):
    """The load an engine last reported on its wire (vLLM ZMQ `scheduler_stats`, TokenSpeed's
    load tail); exported as metrics (docs/observability.md §1)."""

    running: int
    waiting: int
    kv_cache_usage: float
    """The share of KV cache blocks in use, 0 to 1."""


class PrefixCacheCounts(msgspec.Struct, frozen=True):
    """An engine's own prefix-cache counts (vLLM's `prefix_cache_stats`, docs/wire.md §A.7.4):
    requests admitted after a lookup, their prompt tokens looked up (`queries`) and found
    cached (`hits`), the same three for preempted requests looked up again, and the cache's
    resets. The engine reports deltas; the backend keeps their running sum per engine, exported
    as counters (docs/observability.md §1)."""

    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0
    resets: int = 0

    def plus(self, other: PrefixCacheCounts) -> PrefixCacheCounts:
        if other is NO_PREFIX_CACHE_DELTA:
            return self
        return PrefixCacheCounts(
            self.requests + other.requests,
            self.queries + other.queries,
            self.hits + other.hits,
            self.preempted_requests + other.preempted_requests,
            self.preempted_queries + other.preempted_queries,
            self.preempted_hits + other.preempted_hits,
            self.resets + other.resets,
        )


NO_PREFIX_CACHE_DELTA: Final = PrefixCacheCounts()
"""A report of nothing new (a decode-only step): the sum it is added to stays as it is."""


class EngineStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One engine (one data-parallel rank) as the backend sees it."""

    index: int
    ready: bool
    """Registered and READY and not known dead: requests may be routed to it."""
    max_model_len: int | None
    """Context length the engine reported at registration (after KV auto-fit)."""
    in_flight: int
    """Engine requests sent to it and not yet finished or aborted."""
    version: str = ""
    """The engine's self-reported version string (vLLM `vllm_version`), "" when unknown."""
    dead_reason: str | None = None
    """Why the engine was declared dead (sentinel, silence, lost connection); None if not."""
    load: EngineLoad | None = None
    """The engine's last reported load; None when its wire carries none (or not yet)."""
    prefix_cache: PrefixCacheCounts | None = None
    """The sum of the prefix-cache counts it reported to this process; None if it never did."""


class BackendStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot for validation, routing and health."""

    runtime: Runtime
    wire: Wire
    ready: bool
    """At least one engine can take requests."""
    max_model_len: int | None
    """The smallest context length among ready engines (what a request must fit), or None."""
    open_streams: int
    in_flight: int
    engines: tuple[EngineStatus, ...]
    protocol_errors: int = 0
    """Engine messages we could not decode and dropped (each is logged)."""
    engine_deaths: int = 0
    """Times an engine was declared dead (sentinel, silence, lost connection) so far."""


class EngineStream(Protocol):
    """What `open_stream` yields; iterate it once, either way.

    `batches()` yields everything that arrived since the previous batch, with each choice's
    token deltas merged (the request layer's way: one wake-up per batch); `async for event in
    stream` yields the same events one at a time.
    """

    def batches(self) -> AsyncIterator[Sequence[EngineEvent]]: ...

    def consume_inline(
        self,
        step: Callable[[Sequence[EngineEvent]], bool],
        tokens: Callable[[int, tuple[int, ...]], bool] | None = None,
    ) -> None:
        """From the task iterating `batches()`: the backend may run `step` on a batch itself,
        from where it applies the engine's messages, while that task waits for it
        (event_stream.py, "inline steps"); False ends the iteration. `tokens(choice, ids)`, if
        given, is `step` on a batch of that one plain delta, which the backend may call instead
        (event_stream.py's `TokensStep`)."""
        ...

    def __aiter__(self) -> EngineStream: ...

    async def __anext__(self) -> EngineEvent: ...


class Backend(Protocol):
    """A client for one engine worker (possibly several data-parallel ranks)."""

    @property
    def runtime(self) -> Runtime: ...

    @property
    def wire(self) -> Wire: ...

    def open_stream(self, finalized: Finalized) -> AbstractAsyncContextManager[EngineStream]:
        """Send every engine request of `finalized` and stream their events (module docstring)."""
        ...

    async def wait_ready(self) -> None:
        """Return once at least one engine is ready; the caller bounds the wait."""
        ...

    def statistics(self) -> BackendStatistics: ...


@runtime_checkable
class Pooler(Protocol):
    """A backend that serves pooling requests (docs/pooling.md §1): the seam every wire that
    pools implements (vLLM ZMQ: `zmq_pooling.py`).

    `pool(request)` sends ONE engine request for one input and returns its one result.
    - Raises before sending anything: `BackendUnavailable` (no ready engine, shutting down),
      `ClientError` (a value the engine would refuse), `UnsupportedRuntime`.
    - Then: `EngineRejected` (the engine failed or aborted it), `EngineDead` (the engine died
      or went silent), `BackendProtocolError` (a finish without a tensor).
    - Cancellation (or any exit) before the result arrived aborts the engine request, shielded
      and bounded (as leaving `open_stream`); a finished request is never aborted.
    - Deadlines are the caller's. The request layer runs one `pool` per input of a client
      request, all in one nursery (request/pooling.py).
    """

    async def pool(self, request: PoolingRequest) -> PooledOutput: ...
