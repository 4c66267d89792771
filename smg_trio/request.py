"""I/O. The per-request nursery: backend stream, stop scanner and client writer as three tasks.

    pump     engine events ──mailbox──▶ scanner ──mailbox──▶ writer ──▶ client
     ▲                                    │
     └──────── cancelled when every choice is done (router stop or engine finish)

- `prepare` and `finalize` ran before this: nothing here can fail on request shape.
- Leaving the backend's `open_stream` block for any reason aborts what the engine is still
  generating, so a router-side stop or a vanished client costs no more engine time.
- The tasks hand over through coalescing mailboxes (`put_nowait` never blocks; the consumer
  takes everything queued in one wake-up): one task switch per hop and batch instead of two per
  item. The scanner therefore keeps up with the engine whatever the client does, so a stop
  string aborts the engine as soon as its tokens arrive, and a slow client gets the payloads
  that piled up in one write. Memory is bounded by the request: at most one payload per engine
  output (max_tokens) plus the closing ones, freed when the nursery ends.
- A client that goes away raises `ClientGone` from the sink; it cancels the nursery and is
  swallowed here. Engine errors before the first byte propagate (the front end renders an HTTP
  error); after it they become a final error event and a clean end of stream. A failed task
  never closes its outgoing mailbox, so nothing downstream mistakes a failure for an end.
- A non-streaming request has no writer: its body goes out once the nursery ended.
- Deadlines are the caller's (`trio.fail_at` around `run_request`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol, assert_never

import trio

from smg_trio.backends.base import Backend
from smg_trio.backends.mailbox import Mailbox
from smg_trio.core.finalize import Finalized
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ClientGone, GatewayError
from smg_trio.neutral.events import ChoiceFinished, EngineEvent, TokenDelta, coalesce


class SinkState(enum.Enum):
    IDLE = "idle"  # nothing sent: an error can still be an HTTP status
    STREAMING = "streaming"  # bytes went out: an error is a final event
    CLOSED = "closed"


class ClientSink(Protocol):
    """Where one request's output goes (an SSE response, a WebSocket stream, a terminal)."""

    @property
    def state(self) -> SinkState: ...

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        """Streaming payloads, in order (one or more; as one write where the transport
        allows); raises ClientGone when the client left."""
        ...

    async def send_body(self, body: bytes) -> None:
        """The whole non-streaming response."""
        ...

    async def close_stream(self, error: GatewayError | None) -> None:
        """End a stream: an error event when `error` is given, then the end marker."""
        ...


async def run_request(
    plan: GeneratePlan,
    finalized: Finalized,
    backend: Backend,
    tokenizer: TokenizerLike,
    sink: ClientSink,
    *,
    created: int,
) -> None:
    """Serve one request to `sink`. Raises GatewayError only while nothing was sent."""
    assembler = ResponseAssembler(plan, tokenizer, created=created)
    failure: GatewayError | None = None
    client_gone = False
    try:
        await _run_tasks(plan, finalized, backend, assembler, sink)
    except* ClientGone:
        client_gone = True
    except* GatewayError as group:
        # Backend errors, and a ClientError a backend raises at open time (prompt too long).
        first = group.exceptions[0]
        assert isinstance(first, GatewayError)
        failure = first
    if client_gone:
        return
    if failure is not None:
        if sink.state is SinkState.IDLE:
            raise failure
        await sink.close_stream(failure)
    elif plan.stream:
        await sink.close_stream(None)
    else:
        await sink.send_body(assembler.response_body())


async def _run_tasks(
    plan: GeneratePlan,
    finalized: Finalized,
    backend: Backend,
    assembler: ResponseAssembler,
    sink: ClientSink,
) -> None:
    deltas: Mailbox[EngineEvent] = Mailbox()
    payloads: Mailbox[bytes] | None = Mailbox() if plan.stream else None
    async with trio.open_nursery() as nursery:
        pump_scope = trio.CancelScope()

        async def pump() -> None:
            with pump_scope:
                async with backend.open_stream(finalized) as events:
                    async for event in events:
                        deltas.put_nowait(event)
            deltas.close()  # the engine finished, or the scanner is done and left already

        async def scan() -> None:
            async for batch in deltas:
                for event in coalesce(batch):
                    chunk = _assemble(assembler, event)
                    if payloads is not None:
                        for payload in chunk:
                            payloads.put_nowait(payload)
                    if assembler.done:
                        break
                if assembler.done:
                    # Every choice is over: leaving the stream aborts the engine's rest.
                    pump_scope.cancel()
                    break
            if payloads is not None:
                for payload in assembler.closing_payloads():
                    payloads.put_nowait(payload)
                payloads.close()

        async def write(payloads: Mailbox[bytes]) -> None:
            async for batch in payloads:
                await sink.send_chunks(batch)

        nursery.start_soon(pump)
        nursery.start_soon(scan)
        if payloads is not None:
            nursery.start_soon(write, payloads)


def _assemble(assembler: ResponseAssembler, event: EngineEvent) -> list[bytes]:
    match event:
        case TokenDelta(choice_index=index, token_ids=token_ids):
            return assembler.on_tokens(index, token_ids)
        case ChoiceFinished(
            choice_index=index,
            finish_reason=reason,
            stop_reason=stop_reason,
            completion_tokens=tokens,
        ):
            return assembler.on_engine_finished(index, reason, stop_reason, tokens)
        case _:
            assert_never(event)
