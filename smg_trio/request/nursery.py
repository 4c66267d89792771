"""I/O. The per-request nursery: the backend stream under the stop scanner, and the client writer.

    engine events ──(backend mailbox)──▶ scanner ──chunks mailbox──▶ writer ──▶ client
                                           │
       leaves the backend stream when every choice is done (router stop or engine finish)

- `prepare` and `finalize` ran before this: nothing here can fail on request shape.
- The scanner (the request's own task) holds the backend's `open_stream` block and takes its
  events a batch at a time, merged once by the backend stream, straight into the response
  assembler. Its per-batch `step` is registered with the stream too: while the task waits, the
  backend's output reader (ZMQ's reader task, gRPC's hand-off) runs the step on a batch itself,
  in this task's context, instead of waking it (backends/event_stream.py, "inline steps");
  False or an error from the step ends the task's loop as if it had run there. Leaving the
  block for any reason aborts what the engine is still generating, so a router-side stop
  leaves it at once and a vanished client costs no more engine time.
- The writer is the scanner's one child, started once a batch's payloads were not all taken at
  once (below): the scanner hands it each batch's payloads through a coalescing mailbox
  (`put_nowait` never blocks; the writer takes everything queued in one wake-up). The scanner therefore keeps up with the engine whatever the client does, so a stop
  string aborts the engine as soon as its tokens arrive, and a slow client gets the payloads
  that piled up in one write. Memory is bounded by the request: at most one payload list per
  engine batch (max_tokens), freed when the nursery ends. While the writer is idle, the
  scanner sends a batch itself if the sink takes it without waiting (`send_chunks_now`), which
  saves the hop; anything that would wait still goes through the writer, in order.
- A client already gone when the request is ready for the engine costs no engine work: the
  sink's `gone_before_engine()` is asked right before `open_stream` sends the ADD (rapid reset,
  docs/architecture.md §3.1).
- A client that goes away raises `ClientGone` from the sink; it cancels the nursery and is
  swallowed here. Any other failure is the sink's to render (`ClientSink.fail`: an HTTP error
  while nothing was sent, a final error event after). A failed scanner never closes the chunks
  mailbox, so the writer never mistakes a failure for an end.
- A stream ends with the assembler's `StreamEnd` (closing chunks, finish and usage as data); a
  non-streaming request has no writer and its body goes out once the nursery ended.
- A worker failure mid-request (its engine died, went silent, or its stream broke) may be
  followed by another worker's stream: `Failover.next_stream` (smg_trio/request/migration.py) picks it
  and builds the continuation; the same assembler, scanners and writer go on with it, so the
  client's stream has no seam (docs/resilience.md §9).
- An abort by id (request/client_aborts.py) cancels the scope around the engine stream: leaving
  it aborts the engine requests, and the choices not yet over finish with `abort`, the tokens
  received kept (vLLM's answer to its `POST /inference/v1/abort_requests`).
- Deadlines are the caller's (request/gateway.py: the deadline of the request's live scope).
- The request's `RequestRecord` is updated once per engine batch, never per token, and gets the
  usage and finish reasons once the request ended (docs/observability.md §2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Protocol

import msgspec
import trio

from smg_trio.backends.base import Backend
from smg_trio.backends.event_stream import InlineStep, TokensStep
from smg_trio.core.finalize import Finalized
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ClientGone, GatewayError
from smg_trio.handoff import Mailbox, Taken
from smg_trio.neutral.events import ChoiceFinished, EngineEvent
from smg_trio.observability.request_record import CLIENT_GONE, ROUTER_STOP, RequestRecord
from smg_trio.request.client_aborts import ClientAbort
from smg_trio.sink import ClientSink


class NextStream(msgspec.Struct, frozen=True, kw_only=True):
    """Where a migrated request goes on: `finalized` (the continuation, for `backend`), and
    the choices that had all their tokens and finish with "length" without an engine."""

    backend: Backend
    finalized: Finalized
    at_length: tuple[int, ...] = ()


class Failover(Protocol):
    """Mid-stream migration (smg_trio/request/migration.py, docs/resilience.md §9)."""

    async def next_stream(
        self, error: GatewayError, received: list[tuple[int, ...] | None]
    ) -> NextStream | None:
        """After the request's stream failed with `error`, having received `received` (per
        choice, the ids so far; None: the choice is over): where it goes on, or None to let
        the failure stand."""
        ...


async def run_request(
    plan: GeneratePlan,
    finalized: Finalized,
    backend: Backend,
    tokenizer: TokenizerLike,
    sink: ClientSink,
    *,
    created: int,
    record: RequestRecord,
    failover: Failover | None = None,
    abort: ClientAbort | None = None,
) -> None:
    """Serve one request to `sink`, its failures included (through `sink.fail`); a failure of
    its worker may move it to another through `failover`; `abort` may end it early."""
    made: list[ResponseAssembler] = []

    def make_assembler() -> ResponseAssembler:
        # Made once the ADD is out, while the engine works, not before it (the first token's
        # path, docs/performance.md §3); here at the latest when the request ended before.
        if not made:
            made.append(ResponseAssembler(plan, tokenizer, created=created))
        return made[0]

    failure: GatewayError | None = None
    client_gone = False
    try:
        await _run_tasks(plan, finalized, backend, make_assembler, sink, record, failover, abort)
    except* ClientGone:
        client_gone = True
    except* GatewayError as group:
        # Backend errors, and a ClientError a backend raises at open time (prompt too long).
        first = group.exceptions[0]
        assert isinstance(first, GatewayError)
        failure = first
    finally:
        assembler = make_assembler()
        record.assembled(
            assembler.usage,
            assembler.finish_reasons,
            assembler.texts() if record.keeps_text else None,
        )
    if client_gone:
        record.aborted(CLIENT_GONE)
        return
    if failure is not None:
        record.failed(failure)
        await sink.fail(failure)
    elif plan.stream:
        end = assembler.stream_end()
        record.answered = True
        await sink.end_stream(end)
    else:
        body = assembler.response_body()
        record.answered = True
        await sink.send_body(body)


async def _run_tasks(
    plan: GeneratePlan,
    finalized: Finalized,
    backend: Backend,
    make_assembler: Callable[[], ResponseAssembler],
    sink: ClientSink,
    record: RequestRecord,
    failover: Failover | None,
    abort: ClientAbort | None,
) -> None:
    writer = ChunkWriter(sink) if plan.stream else None
    steps: list[InlineStep] = []  # the request's one step, made with its assembler
    lanes: list[TokensStep] = []  # and its fast lane
    async with trio.open_nursery() as nursery:

        def make_step() -> InlineStep:
            # Made once the first ADD is out: what the first output needs is set up while the
            # engine works.
            if not steps:
                record.engine_sent()
                assembler = make_assembler()
                steps.append(_step_for(assembler, writer, record))
                lanes.append(_tokens_step_for(assembler, writer, record))
                if writer is not None:
                    writer.starts_in(nursery)
            return steps[0]

        # A client already gone costs no ADD and no ABORT. The frontends see to it that a
        # reset or cancel sent with the request has been read by now (rapid reset): HTTP's
        # `respond` waits until its packet went through the server, a WebSocket stream yields
        # once to the socket's reader first (docs/architecture.md §3.1).
        if sink.gone_before_engine():
            raise ClientGone
        with nullcontext() if abort is None else abort.scope() as scope:
            while True:
                try:
                    async with backend.open_stream(finalized) as events:
                        step = make_step()
                        # The reader may run `step` for us while we wait (event_stream.py).
                        events.consume_inline(step, lanes[0])
                        async for batch in events.batches():
                            if not step(batch):
                                break
                    break
                except GatewayError as error:
                    # Mid-stream migration (docs/resilience.md §9): the same assembler, scanner
                    # and writer go on with another worker's stream, or the failure stands.
                    assembler = make_assembler()
                    following = (
                        None
                        if failover is None
                        else await failover.next_stream(error, assembler.received_ids())
                    )
                    if following is None:
                        raise
                    backend, finalized = following.backend, following.finalized
                    if following.at_length:
                        at_length = following.at_length
                        make_step()(tuple(_length_finish(assembler, i) for i in at_length))
                    if assembler.done:
                        break
        if scope is not None and scope.cancelled_caught:
            assembler = make_assembler()
            received = enumerate(assembler.received_ids())
            make_step()(tuple(_abort_finish(i, ids) for i, ids in received if ids is not None))
        if writer is not None:
            writer.close()


def _step_for(
    assembler: ResponseAssembler, writer: ChunkWriter | None, record: RequestRecord
) -> InlineStep:
    """The request's handling of one engine batch (the module doc's scanner)."""

    def step(batch: Sequence[EngineEvent]) -> bool:
        record.on_batch(batch)
        return _goes_on(assembler.on_events(batch), assembler, writer, record)

    return step


def _tokens_step_for(
    assembler: ResponseAssembler, writer: ChunkWriter | None, record: RequestRecord
) -> TokensStep:
    """The step on a batch that is one choice's token ids, no event made (backends/
    event_stream.py's fast lane): the same work, through `on_tokens`."""

    def tokens(index: int, token_ids: tuple[int, ...]) -> bool:
        record.on_tokens(len(token_ids))
        return _goes_on(assembler.on_tokens(index, token_ids), assembler, writer, record)

    return tokens


def _goes_on(
    payloads: list[bytes],
    assembler: ResponseAssembler,
    writer: ChunkWriter | None,
    record: RequestRecord,
) -> bool:
    """After a step: its payloads to the client, and whether the stream goes on (False once
    every choice is over: leaving the stream aborts the engine's rest)."""
    if writer is not None and payloads:
        writer.hand_over(payloads)
    if assembler.done:
        if record.engine_finishes < assembler.choice_count:
            record.aborted(ROUTER_STOP)
        return False
    return True


def _length_finish(assembler: ResponseAssembler, choice_index: int) -> ChoiceFinished:
    """A choice that had all its `max_tokens` when its worker failed ends as the engine would
    have ended it (docs/resilience.md §9)."""
    received = assembler.received_ids()[choice_index]
    tokens = 0 if received is None else len(received)
    return ChoiceFinished(
        choice_index=choice_index,
        finish_reason="length",
        stop_reason=None,
        prompt_tokens=0,
        completion_tokens=tokens,
    )


def _abort_finish(choice_index: int, received: tuple[int, ...]) -> ChoiceFinished:
    """A choice not over when its request was aborted by id ends as vLLM's do: `abort`."""
    return ChoiceFinished(
        choice_index=choice_index,
        finish_reason="abort",
        stop_reason=None,
        prompt_tokens=0,
        completion_tokens=len(received),
    )


class ChunkWriter:
    """The hand-off from the scanner to the client writer task (see the module doc): `hand_over`
    from the scanner, `run` as the writer, `close` after the last payloads. The writer task is
    started (in the nursery given to `starts_in`) only once a hand-over left something for it:
    a stream whose every chunk the sink took at once never has one."""

    __slots__ = ("_chunks", "_nursery", "_sink")

    def __init__(self, sink: ClientSink) -> None:
        self._sink = sink
        self._chunks: Mailbox[list[bytes]] = Mailbox()
        self._nursery: trio.Nursery | None = None  # until the writer task is started

    def starts_in(self, nursery: trio.Nursery) -> None:
        """Where the writer task runs, once `hand_over` needs it."""
        self._nursery = nursery

    def hand_over(self, payloads: list[bytes]) -> None:
        """Payloads to the client: sent by the calling task when the writer is idle (nothing
        of this request queued before them, no send of the writer's under way, or not started
        yet) and the sink takes them at once, else queued for the writer (docs/performance.md
        §2: one task hop less per chunk), started now if it was not. Never waits."""
        nursery = self._nursery
        if nursery is None:  # the writer started (or is not ours to start): the hand-off's way
            self._chunks.offer(payloads, self._send_now)
            return
        # Never started: nothing queued, nothing being sent, so `offer` would take it now.
        taken = self._sink.send_chunks_now(payloads)
        if taken is not Taken.ALL:
            # PART: the sink holds the rest; the writer's `send_chunks(())` ends it.
            self._chunks.put_nowait([] if taken is Taken.PART else payloads)
            self._nursery = None
            nursery.start_soon(self.run)

    def _send_now(self, payloads: list[bytes]) -> tuple[Taken, list[bytes]]:
        taken = self._sink.send_chunks_now(payloads)
        if taken is Taken.PART:
            return taken, []  # the sink holds the rest: the writer's `send_chunks(())` ends it
        return taken, payloads

    def close(self) -> None:
        """No more payloads: `run` returns once everything handed over went out."""
        self._chunks.close()

    async def run(self) -> None:
        """The writer task: whatever piled up since its last send, in one `send_chunks`."""
        sink = self._sink
        async for lists in self._chunks:
            await sink.send_chunks(lists[0] if len(lists) == 1 else [p for ps in lists for p in ps])
