"""I/O. One open request's view of an engine backend (ZMQ or gRPC): the per-request mailbox the
backend's reader side fills, and the side the request consumes.

The reader calls the `deliver`/`end`/`fail` methods, which never block: a slow consumer only
makes its own mailbox grow (bounded by max_tokens), and on its next call it receives everything
that piled up, with consecutive token deltas of a choice merged into one event. This is the one
place events are merged (`coalesce`, once per batch).

The request layer takes them a batch at a time (`async for batch in stream.batches()`) and
hands each batch to the response assembler as it is. `async for event in stream` yields the same
events one by one, for code that wants them singly (backend tests, benchmarks).

Inline steps (docs/performance.md §2): a backend that applies the engine's messages a batch at a
time in trio (ZMQ's output reader task, gRPC's hand-off callback) creates its streams with an
`InlineBatches` and flushes it after each batch. A request that registers its synchronous
per-batch step with `consume_inline` then has a batch handed to that step by the reader itself,
in the request's own context, when the reader flushes after a read and the request is parked
waiting for it with nothing queued: the request task is not woken for a batch it would only hand
on. The step returning False (every choice done) or raising ends the iteration the task is
parked in, exactly as its own loop would have ended; anything else (the task busy or cancelled,
the stream ending or failing) takes the mailbox as before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from functools import partial

import trio

from smg_trio.handoff import Mailbox, MailboxStatistics
from smg_trio.neutral.events import EngineEvent, TokenDelta, coalesce


class EventBatches:
    """`async for batch in stream.batches()`: each batch coalesced, never empty."""

    __slots__ = ("_mailbox",)

    def __init__(self, mailbox: Mailbox[EngineEvent]) -> None:
        self._mailbox = mailbox

    def __aiter__(self) -> EventBatches:
        return self

    async def __anext__(self) -> Sequence[EngineEvent]:
        try:
            batch = await self._mailbox.get_batch()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None
        return coalesce(batch)


InlineStep = Callable[[Sequence[EngineEvent]], bool]
"""A request's handling of one batch: False once it wants no more (every choice done)."""
TokensStep = Callable[[int, tuple[int, ...]], bool]
"""A request's handling of a batch that is one choice's token ids and nothing else (no
logprobs, prompt logprobs, finish or other choice): exactly `InlineStep` on
`[TokenDelta(choice_index, token_ids)]`, without the event (the fast lane)."""


class InlineBatches:
    """The streams holding events for an inline step since the reader's last `flush`."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: list[EngineEventStream] = []

    def hold(self, stream: EngineEventStream) -> None:
        self._held.append(stream)

    def flush(self) -> None:
        """After a read's messages were dispatched: each stream's events as one batch."""
        held = self._held
        if held:
            self._held = []
            for stream in held:
                stream.flush_inline()


class EngineEventStream:
    """The events of one `open_stream` block; iterate it once, by batch or by event."""

    def __init__(
        self, engine_request_ids: tuple[str, ...], inline: InlineBatches | None = None
    ) -> None:
        self.engine_request_ids = engine_request_ids
        """The engine-side ids of the choices, in choice order (for logs and tests)."""
        self._mailbox: Mailbox[EngineEvent] = Mailbox()
        self._batches = EventBatches(self._mailbox)
        self._pending: deque[EngineEvent] = deque()
        self._closed = False
        self._inline = inline
        self._step: InlineStep | None = None  # the request's step, run in its context
        self._tokens: TokensStep | None = None  # its fast lane, run in its context
        self._held: list[EngineEvent] = []
        # The fast lane's hold: one choice's plain token ids, while nothing else is held.
        self._held_ids: tuple[int, ...] | None = None
        self._held_choice = 0

    def consume_inline(self, step: InlineStep, tokens: TokensStep | None = None) -> None:
        """From the task that iterates `batches()`: the reader may hand a batch to `step`, run
        in this task's context, instead of waking the task (see the module doc); a batch that
        is one choice's plain token ids to `tokens`, if given, without making the event. A
        no-op on a backend without a single reader."""
        if self._inline is not None:
            # `context.run(step, ...)` through a partial: no Python frame of ours per batch.
            run: Callable[..., bool] = trio.lowlevel.current_task().context.run
            self._step = partial(run, step)
            if tokens is not None:
                self._tokens = partial(run, tokens)

    def batches(self) -> EventBatches:
        """Everything delivered since the previous batch, merged; ends or fails as told."""
        return self._batches

    def __aiter__(self) -> EngineEventStream:
        return self

    async def __anext__(self) -> EngineEvent:
        if not self._pending:
            self._pending.extend(await self._batches.__anext__())
        return self._pending.popleft()

    def statistics(self) -> MailboxStatistics:
        """The mailbox's snapshot (for debugging and tests)."""
        return self._mailbox.statistics()

    @property
    def closed(self) -> bool:
        """No more events will be delivered (ended, failed or left)."""
        return self._closed

    def deliver(self, event: EngineEvent) -> None:
        if self._closed:
            return
        if self._step is None:
            self._mailbox.put_nowait(event)
            return
        held = self._held
        if self._held_ids is not None:  # a second event: the held ids become a delta first
            held.append(TokenDelta(self._held_choice, self._held_ids))
            self._held_ids = None
        held.append(event)
        if len(held) == 1:
            assert self._inline is not None  # a step is only taken with one
            self._inline.hold(self)

    def deliver_tokens(self, choice_index: int, token_ids: tuple[int, ...]) -> None:
        """`deliver(TokenDelta(choice_index, token_ids))`, held as the ids alone while they are
        all the fast lane will get (docs/performance.md §2)."""
        if self._tokens is None or self._held or self._held_ids is not None or self._closed:
            self.deliver(TokenDelta(choice_index, token_ids))
            return
        self._held_ids = token_ids
        self._held_choice = choice_index
        assert self._inline is not None  # a step is only taken with one
        self._inline.hold(self)

    def flush_inline(self) -> None:
        """The events held since the last flush: to the inline step when the consumer is
        parked with nothing queued, else to the mailbox. Held ids alone (the fast lane's) go
        to the lane as the step would get them, or as a delta to the mailbox."""
        ids = self._held_ids
        mailbox = self._mailbox
        if ids is not None:  # the fast lane's: nothing else is held
            self._held_ids = None
            if not mailbox.owner_parked():
                mailbox.put_nowait(TokenDelta(self._held_choice, ids))
                return
            assert self._tokens is not None  # ids are only held for a fast lane
            try:
                more = self._tokens(self._held_choice, ids)
            except Exception as error:
                self._end_inline(error)
                return
            if not more:
                self._end_inline(None)
            return
        held = self._held
        if not held:  # the stream ended or failed since: they went to the mailbox
            return
        self._held = []
        if not mailbox.owner_parked():
            for event in held:
                mailbox.put_nowait(event)
            return
        assert self._step is not None  # events are only held for a step
        try:
            more = self._step(coalesce(held))
        except Exception as error:
            self._end_inline(error)
            return
        if not more:
            self._end_inline(None)

    def _end_inline(self, error: Exception | None) -> None:
        """The inline step said it wants no more (`error` None) or raised `error`: the task's
        loop ends, or raises it, as if the step had run there."""
        self._closed = True
        self._mailbox.close(error)

    def _release_held(self) -> None:
        if self._held_ids is not None:
            self._mailbox.put_nowait(TokenDelta(self._held_choice, self._held_ids))
            self._held_ids = None
        if self._held:
            for event in self._held:
                self._mailbox.put_nowait(event)
            self._held = []

    def end(self) -> None:
        """Every choice finished: the iteration ends after the queued events."""
        self._release_held()
        self._closed = True
        self._mailbox.close()

    def fail(self, error: BaseException) -> None:
        """The iteration raises `error` after the queued events; later events are dropped."""
        self._release_held()
        self._closed = True
        self._mailbox.close(error)
