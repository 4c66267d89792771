"""I/O. One open request's view of an engine backend (ZMQ or gRPC): the per-request mailbox the
backend's reader side fills, and the `async for` side the request consumes.

The reader calls the `deliver`/`end`/`fail` methods, which never block: a slow consumer only
makes its own mailbox grow (bounded by max_tokens), and on its next call it receives everything
that piled up, with consecutive token deltas of a choice merged into one event.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import assert_never

import trio

from smg_trio.backends.base import ChoiceFinished, EngineEvent, TokenDelta
from smg_trio.backends.mailbox import Mailbox


class EngineEventStream:
    """The events of one `open_stream` block; iterate it once with `async for`."""

    def __init__(self, engine_request_ids: tuple[str, ...]) -> None:
        self.engine_request_ids = engine_request_ids
        """The engine-side ids of the choices, in choice order (for logs and tests)."""
        self._mailbox: Mailbox[EngineEvent] = Mailbox()
        self._pending: deque[EngineEvent] = deque()
        self._closed = False

    def __aiter__(self) -> EngineEventStream:
        return self

    async def __anext__(self) -> EngineEvent:
        if not self._pending:
            try:
                batch = await self._mailbox.get_batch()
            except trio.EndOfChannel:
                raise StopAsyncIteration from None
            self._pending.extend(coalesce(batch))
        return self._pending.popleft()

    @property
    def closed(self) -> bool:
        """No more events will be delivered (ended, failed or left)."""
        return self._closed

    def deliver(self, event: EngineEvent) -> None:
        if not self._closed:
            self._mailbox.put_nowait(event)

    def end(self) -> None:
        """Every choice finished: the iteration ends after the queued events."""
        self._closed = True
        self._mailbox.close()

    def fail(self, error: BaseException) -> None:
        """The iteration raises `error` after the queued events; later events are dropped."""
        self._closed = True
        self._mailbox.close(error)


def coalesce(events: Sequence[EngineEvent]) -> Sequence[EngineEvent]:
    """Merge each choice's token deltas in a batch into its first one; order within a choice kept.

    A choice's `ChoiceFinished` comes after all of its deltas, so merging a later delta into an
    earlier position never moves tokens past their finish. Deltas are gathered first and each
    merged delta is built once (linear in the batch, however far a slow consumer fell behind).
    """
    if len(events) < 2:  # the common case, one event per wake-up: nothing to merge
        return events
    slots: list[EngineEvent | list[TokenDelta]] = []
    open_group: dict[int, list[TokenDelta]] = {}  # choice index -> its deltas in this batch
    for event in events:
        match event:
            case TokenDelta(choice_index=choice):
                group = open_group.get(choice)
                if group is None:
                    group = open_group[choice] = []
                    slots.append(group)
                group.append(event)
            case ChoiceFinished(choice_index=choice):
                open_group.pop(choice, None)
                slots.append(event)
            case _:
                assert_never(event)
    return [_merged(slot) if isinstance(slot, list) else slot for slot in slots]


def _merged(deltas: list[TokenDelta]) -> TokenDelta:
    if len(deltas) == 1:
        return deltas[0]
    token_ids = tuple(token for delta in deltas for token in delta.token_ids)
    logprobs = None
    if all(delta.logprobs is not None for delta in deltas):
        logprobs = tuple(lp for delta in deltas for lp in delta.logprobs or ())
    return TokenDelta(choice_index=deltas[0].choice_index, token_ids=token_ids, logprobs=logprobs)
