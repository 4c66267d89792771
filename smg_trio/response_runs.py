"""I/O. Responses that outlive their connection (docs/client-apis.md §3.5): each runs in a
nursery the gateway owns, and appends its events to the store's event log; clients (the one
that created it, a resumed stream, another process) only subscribe to that log.

    ResponseRuns.serve ─┬─ the runs' nursery: one task per run, `Gateway.handle` writing
                        │   through a `LogSink` (numbered events → event log → local tails)
                        └─ housekeeping every HEARTBEAT_S: refresh this process's open runs,
                           apply cancels other processes asked for, end the runs of dead
                           processes `incomplete`, drop the events past their retention

- A run's generation is an ordinary request (`Gateway.handle`: lifecycle, deadline, retries,
  migration, metrics, log line); only its sink differs. So the drain treats it as any request:
  it may finish within `--drain-timeout-s`, then it is cancelled and, being a background
  response, ends `incomplete` (reason `gateway_shutdown`); a resumable stream ends as a
  foreground stream does (the `error` and `response.failed` events).
- `start` is the one place a run begins; `Gateway.start_response` is its only caller (where a
  tenant's limits apply). A transport other than HTTP (a Responses WebSocket) starts runs and
  follows them through the same two calls: `Gateway.start_response` and `follow`.
- An append goes to the run's window in memory (its local tails wake at once) and to the log
  at the next flush: one transaction per FLUSH_INTERVAL_S for every run of the process; a
  run's last append waits for the log. A local tail reads the run's last LOCAL_WINDOW events
  from memory; a tail of a run owned by another process polls the log every TAIL_POLL_S.
- Cancelling a run cancels its scope: leaving the backend stream aborts its engine requests.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec
import trio

from smg_trio.core.response_runs import (
    ABANDONED_REASON,
    CANCELLED,
    ENDED_STATUSES,
    FAILED,
    INCOMPLETE,
    LIFECYCLE_EVENTS,
    SHUTDOWN_REASON,
    ending,
    error_of,
    with_status,
)
from smg_trio.core.responses_dialect import ResponsesDialect
from smg_trio.core.stream_end import StreamEnd
from smg_trio.errors import ClientError, GatewayError
from smg_trio.handoff import Taken
from smg_trio.lifecycle import Draining
from smg_trio.observability.metrics import GatewayMetrics
from smg_trio.response_store.event_log import Append, EventLog, LoggedEvent, Run

logger = logging.getLogger(__name__)

HEARTBEAT_S: Final = 1.0
STALE_AFTER_S: Final = 10.0
"""A run whose owner has not refreshed it for this long is ended by whoever finds it."""
TAIL_POLL_S: Final = 0.01
"""How often a tail of another process's run reads the log (bench: `response_tail`)."""
FLUSH_INTERVAL_S: Final = 0.01
"""At most one write of the event log per interval: a stream's appends cost one transaction
per interval, not one per engine batch, and every run of the process shares it."""
LOCAL_WINDOW: Final = 512
"""Events of a local run kept in memory for its tails (older ones are read from the log)."""
TAIL_BATCH: Final = 512
CANCEL_WAIT_S: Final = 5.0
"""How long `POST .../cancel` waits for the run to end before answering its state."""
END_GRACE_S: Final = 2.0
"""Shielded bound for writing a run's last event after its generation was cancelled."""
DEFAULT_RETENTION_S: Final = 3600.0
DEFAULT_EVENTS_MAX: Final = 65536
DEFAULT_RESUME_GRACE_S: Final = 30.0

Generate = Callable[["LogSink"], Awaitable[None]]
_decode = msgspec.json.decode


class SynchronousResponse(ClientError):
    """`cancel` of a response that was not created in the background (OpenAI's 400)."""

    def __init__(self) -> None:
        super().__init__("Cannot cancel a synchronous response.", param="response_id")


@dataclass(eq=False)
class LocalRun:
    """A run this process owns, while it runs."""

    id: str
    background: bool
    status: str
    response: bytes
    next_seq: int = 0
    window: list[LoggedEvent] = field(default_factory=list)
    """The run's last events (between LOCAL_WINDOW and twice that), oldest first."""
    changed: trio.Event = field(default_factory=trio.Event)
    done: trio.Event = field(default_factory=trio.Event)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    ending: bool = False
    """Its last append began (its events go to the log before its followers see them)."""
    ended: bool = False
    """Its last event is in the log and in its window."""
    cancel_asked: bool = False
    subscribers: int = 0
    early_error: GatewayError | None = None
    """A resumable stream that failed before its first event: its creator gets this error
    as the HTTP status it would have had without the log."""
    pending: list[tuple[bytes, bytes]] = field(default_factory=list)
    """Events not yet in the log, numbered from `durable_seq`."""
    durable_seq: int = 0

    @property
    def oldest_in_memory(self) -> int:
        """The number of the oldest event the window holds (the next one's when empty)."""
        return self.window[0].seq if self.window else self.next_seq

    @property
    def kind(self) -> str:
        return "background" if self.background else "resumable"


class Tail(msgspec.Struct, frozen=True):
    """A checked subscription: the run exists and still holds the events after `after`."""

    run_id: str
    after: int


class ResponseRuns:
    """The gateway's runs (module doc); `log` None: the store keeps nothing, runs refused."""

    def __init__(
        self,
        log: EventLog | None,
        metrics: GatewayMetrics,
        *,
        retention_s: float = DEFAULT_RETENTION_S,
        events_max: int = DEFAULT_EVENTS_MAX,
        resume_grace_s: float = DEFAULT_RESUME_GRACE_S,
    ) -> None:
        self.log = log
        self.metrics = metrics
        self.retention_s = retention_s
        self.events_max = events_max
        self.resume_grace_s = resume_grace_s
        self.owner = uuid.uuid4().hex  # this process, for its runs' rows
        self._local: dict[str, LocalRun] = {}
        self._nursery: trio.Nursery | None = None
        self._dirty: dict[str, LocalRun] = {}  # runs with events or state not in the log yet
        self._flush_wanted = trio.Event()
        self._flush_lock = trio.Lock()

    @property
    def accepting(self) -> bool:
        return self._nursery is not None and self.log is not None

    def local(self, run_id: str) -> LocalRun | None:
        return self._local.get(run_id)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the runs' nursery and do the housekeeping until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                nursery.start_soon(self._flush_forever)
                task_status.started()
                await self._housekeeping()
            finally:
                self._nursery = None

    async def _housekeeping(self) -> None:
        beats = 0
        while True:
            await trio.sleep(HEARTBEAT_S)
            log = self.log
            if log is None:
                continue
            now = time.time()
            try:
                if self._local:
                    for run_id in await log.beat(self.owner, now):
                        run = self._local.get(run_id)
                        if run is not None:
                            self._cancel_local(run)
                beats += 1
                # Only a process that uses the store sweeps it (one never asked to store
                # opens no database, docs/client-apis.md §3.3).
                if beats % 5 == 1 and log.used:
                    await self.end_stale(now)
                    await log.expire(now - self.retention_s)
            except GatewayError as error:  # the store is down: try again next beat
                logger.warning("response runs housekeeping: %s", error.message)

    async def end_stale(self, now: float | None = None) -> list[str]:
        """End, `incomplete`, the open runs of processes that stopped refreshing them."""
        assert self.log is not None
        now = time.time() if now is None else now

        def end(run: Run) -> tuple[bytes, bytes, str, bytes]:
            name, data, response = ending(run.response, INCOMPLETE, SHUTDOWN_REASON)
            return name, data, INCOMPLETE, response

        ended = await self.log.end_stale(now - STALE_AFTER_S, end, now)
        for run_id in ended:
            logger.warning("response %s: its process stopped; ended incomplete", run_id)
        return ended

    async def start(
        self,
        run_id: str,
        response: bytes,
        generate: Generate,
        *,
        background: bool,
        creator_follows: bool = False,
    ) -> LocalRun:
        """Begin a run: its row (status from `response`, the queued object), then its task.
        Only `Gateway.start_response` calls this (module doc). `creator_follows`: the caller
        is subscribed from the start and calls `unsubscribe` when its stream ends."""
        log, nursery = self.log, self._nursery
        if log is None or nursery is None:
            raise ClientError(
                "this gateway keeps no responses (start it with --response-store)",
                param="background" if background else "store",
            )
        status = _decode(response)["status"]
        if not await log.begin(
            run_id, self.owner, background=background, response=response, now=time.time()
        ):
            raise ClientError(
                f"a response with id '{run_id}' is still generating",
                status=409,
                code="conflict",
                param="x-request-id",
            )
        run = LocalRun(run_id, background, status, response, subscribers=int(creator_follows))
        self._local[run_id] = run
        self.metrics.response_runs.labels(run.kind, "queued").inc()
        nursery.start_soon(self._run, run, generate)
        return run

    async def _run(self, run: LocalRun, generate: Generate) -> None:
        sink = LogSink(self, run)
        counted = "queued"
        try:
            with run.scope:
                if not run.background and not run.subscribers:
                    run.scope.deadline = trio.current_time() + self.resume_grace_s
                self.metrics.response_runs.labels(run.kind, "queued").dec()
                self.metrics.response_runs.labels(run.kind, "in_progress").inc()
                counted = "in_progress"
                await generate(sink)
        except GatewayError as error:  # refused before it reached a worker
            with trio.move_on_after(END_GRACE_S, shield=True):
                await sink.fail(error)
        except Exception:
            logger.exception("response %s: unexpected error", run.id)
            with trio.move_on_after(END_GRACE_S, shield=True):
                await sink.fail(GatewayError("internal error while generating the response"))
        finally:
            try:
                if not run.ending:  # cancelled (by a client, or abandoned, or the shutdown)
                    with trio.move_on_after(END_GRACE_S, shield=True):
                        if run.cancel_asked:
                            await self.end_with(run, CANCELLED)
                        elif run.background:
                            await self.end_with(run, INCOMPLETE, SHUTDOWN_REASON)
                        else:
                            await self.end_with(run, INCOMPLETE, ABANDONED_REASON)
            finally:
                self.metrics.response_runs.labels(run.kind, counted).dec()
                self.metrics.response_runs_ended.labels(run.kind, run.status).inc()
                logger.info(
                    "response %s ended %s",
                    run.id,
                    run.status,
                    extra={
                        "response_id": run.id,
                        "kind": run.kind,
                        "status": run.status,
                        "events": run.next_seq,
                    },
                )
                if self._local.get(run.id) is run:  # (a new run may have its id already)
                    del self._local[run.id]
                run.done.set()

    async def first_event(self, run: LocalRun) -> None:
        """Wait for the run's first event; a resumable stream that failed before it raises
        its error (its creator answers it as the HTTP status it would have had)."""
        while not run.next_seq and not run.ended:
            await run.changed.wait()
        if run.early_error is not None:
            raise run.early_error

    async def append(
        self, run: LocalRun, events: Sequence[tuple[bytes, bytes]], *, end: bool = False
    ) -> None:
        """`append_now`, or the run's last append: in the log first, then shown to its
        followers, so a client that saw the end finds the run ended in the log (a new run
        may then take its id) and this process forgets no run the log holds open."""
        if not end:
            self.append_now(run, events)
            return
        if run.ending:
            return
        run.ending = True
        first = run.next_seq
        run.status, run.response = self._state_after(run, events, end=True)
        run.pending.extend(events)
        self._dirty[run.id] = run
        try:
            await self.flush()
        finally:
            self._show(run, first, events)
            run.ended = True
            run.changed.set()
            run.changed = trio.Event()

    def append_now(self, run: LocalRun, events: Sequence[tuple[bytes, bytes]]) -> None:
        """Numbered events onto the run: its window and its local followers at once, the log
        at the next flush (FLUSH_INTERVAL_S)."""
        if run.ending:
            return
        first = run.next_seq
        run.status, run.response = self._state_after(run, events, end=False)
        self._show(run, first, events)
        run.pending.extend(events)
        self._dirty[run.id] = run
        run.changed.set()
        run.changed = trio.Event()
        self._flush_wanted.set()

    @staticmethod
    def _state_after(
        run: LocalRun, events: Sequence[tuple[bytes, bytes]], *, end: bool
    ) -> tuple[str, bytes]:
        """The run's status and object after `events` (read from its lifecycle events)."""
        status, response = run.status, run.response
        error = None
        for name, data in events:
            if name in LIFECYCLE_EVENTS:
                obj = _decode(data)["response"]
                status, response = obj["status"], msgspec.json.encode(obj)
            elif name == b"error":
                error = error_of(data)
        if end and status not in ENDED_STATUSES:
            # Failed before `response.created` (e.g. refused at admission): only its `error`
            # event says why, and the object keeps it as OpenAI's failed responses do.
            status, response = FAILED, with_status(response, FAILED, error=error)
        return status, response

    @staticmethod
    def _show(run: LocalRun, first: int, events: Sequence[tuple[bytes, bytes]]) -> None:
        """`events`, numbered from `first`, into the run's window."""
        window = run.window
        window.extend(
            LoggedEvent(first + offset, name, data) for offset, (name, data) in enumerate(events)
        )
        if len(window) > 2 * LOCAL_WINDOW:  # trimmed by halves: amortized O(1) per event
            del window[: len(window) - LOCAL_WINDOW]
        run.next_seq = first + len(events)

    async def flush(self) -> None:
        """Write every run's pending events and state, as one transaction."""
        log = self.log
        assert log is not None
        async with self._flush_lock:  # one write at a time: a run's events land in order
            dirty, self._dirty = self._dirty, {}
            if not dirty:
                return
            taken = [(run, run.pending) for run in dirty.values()]
            appends = []
            for run, events in taken:
                run.pending = []
                appends.append(
                    Append(
                        run.id,
                        run.durable_seq,
                        tuple(events),
                        run.status,
                        run.response,
                        run.ending,
                    )
                )
            try:
                await log.write(appends, now=time.time(), keep=self.events_max)
            except BaseException:
                for run, events in taken:  # kept for the next flush, in order
                    run.pending[:0] = events
                    self._dirty.setdefault(run.id, run)
                raise
            for run, events in taken:
                run.durable_seq += len(events)

    async def _flush_forever(self) -> None:
        """Flush at most every FLUSH_INTERVAL_S: the appends of that interval, every run's,
        share one transaction (bench/RESULTS.md, "the event log's tail latency")."""
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted = trio.Event()
            try:
                await self.flush()
            except GatewayError as error:
                logger.warning("response runs: flushing the event log failed: %s", error.message)
                self._flush_wanted.set()
                await trio.sleep(HEARTBEAT_S)
            await trio.sleep(FLUSH_INTERVAL_S)

    async def end_with(self, run: LocalRun, status: str, reason: str | None = None) -> None:
        """End `run` with `status` and its own last event (a cancel, the shutdown)."""
        name, data, _ = ending(run.response, status, reason)
        numbered = data[:-1] + b',"sequence_number":%d}' % run.next_seq
        await self.append(run, [(name, numbered)], end=True)

    def _cancel_local(self, run: LocalRun) -> None:
        if run.ending:
            return
        run.cancel_asked = True
        run.scope.cancel()

    async def cancel(self, run_id: str) -> bytes | None:
        """Cancel a background run (any process's): the response object once it ended (or
        as it stands after CANCEL_WAIT_S); None: no run has the id."""
        run = self._local.get(run_id)
        if run is not None:
            if not run.background:
                raise SynchronousResponse()
            if not run.ending:  # (an end being written is not cut: it is the answer)
                self._cancel_local(run)
            with trio.move_on_after(CANCEL_WAIT_S):
                await run.done.wait()
            return run.response
        log = self.log
        if log is None:
            return None
        found = await log.run(run_id)
        if found is None:
            return None
        if not found.background:
            raise SynchronousResponse()
        if found.ended or not await log.request_cancel(run_id):
            return found.response
        with trio.move_on_after(CANCEL_WAIT_S):
            while not found.ended:  # the owner sees the ask at its next heartbeat
                await trio.sleep(TAIL_POLL_S * 5)
                found = await log.run(run_id) or found
        return found.response

    async def retrieve(self, run_id: str) -> bytes | None:
        """The run's current response object (None: no run has the id)."""
        run = self._local.get(run_id)
        if run is not None:
            return run.response
        if self.log is None:
            return None
        found = await self.log.run(run_id)
        if found is not None and not found.ended:
            await self.end_stale()  # its process may be gone
            found = await self.log.run(run_id)
        return None if found is None else found.response

    async def open_tail(self, run_id: str, after: int) -> Tail | None:
        """Check a subscription before any byte is sent: None when no run has the id; a 400
        naming `starting_after` when the events after it are no longer kept."""
        run = self._local.get(run_id)
        if run is not None and run.oldest_in_memory <= after + 1:
            return Tail(run_id, after)
        if self.log is None:
            return None
        found, _, first = await self.log.events_after(run_id, after, 1)
        if found is None:
            return None
        if (first is None and found.next_seq > after + 1) or (
            first is not None and first > after + 1
        ):
            raise ClientError(
                f"the events after {after} are no longer kept (the log keeps the last "
                f"{self.events_max} events of a response, for the retention after it ended)",
                param="starting_after",
            )
        return Tail(run_id, after)

    async def follow(
        self, tail: Tail, send: Callable[[list[LoggedEvent]], Awaitable[None]]
    ) -> None:
        """Hand `send` the run's events after `tail.after`, then the live ones as they come,
        a batch at a time, until its last event (each transport frames them its own way: SSE
        named events here, a WebSocket's frames elsewhere)."""
        after = tail.after
        subscribed = self._local.get(tail.run_id)
        if subscribed is not None:
            self.subscribe(subscribed)
        try:
            while True:
                run = self._local.get(tail.run_id)
                oldest = 0 if run is None else run.oldest_in_memory
                if run is not None and oldest <= after + 1:
                    ended = run.ended
                    fresh = run.window[after + 1 - oldest :]
                    if not fresh and not ended:
                        await run.changed.wait()
                        continue
                else:
                    assert self.log is not None
                    found, fresh, _ = await self.log.events_after(tail.run_id, after, TAIL_BATCH)
                    ended = found is None or (found.ended and len(fresh) < TAIL_BATCH)
                    if not fresh and not ended:
                        await trio.sleep(TAIL_POLL_S)
                        continue
                if fresh:
                    await send(fresh)
                    after = fresh[-1].seq
                if ended and (run is None or after + 1 >= run.next_seq):
                    return
        finally:
            if subscribed is not None:
                self.unsubscribe(subscribed)

    def subscribe(self, run: LocalRun) -> None:
        """Someone follows the run: a resumable stream goes on however long it takes."""
        run.subscribers += 1
        run.scope.deadline = float("inf")

    def unsubscribe(self, run: LocalRun) -> None:
        """One follower fewer; with none left, a resumable stream has `resume_grace_s` for
        someone to resume it before it is abandoned (its scope's deadline)."""
        run.subscribers -= 1
        if run.subscribers == 0 and not run.background and not run.ended:
            run.scope.deadline = trio.current_time() + self.resume_grace_s


class LogSink:
    """The `ClientSink` of a run: numbered events onto the event log (module doc)."""

    def __init__(self, runs: ResponseRuns, run: LocalRun) -> None:
        self._runs = runs
        self._run = run
        self._dialect = ResponsesDialect()

    def gone_before_engine(self) -> bool:
        return False

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        if payloads:
            self._runs.append_now(self._run, self._dialect.numbered(payloads))
        await trio.lowlevel.checkpoint()

    def send_chunks_now(self, payloads: Sequence[bytes]) -> Taken:
        # An append is to memory (the log is written by the flusher): never waits, so the
        # request's scanner hands it over itself, without a hop to its writer task.
        if payloads:
            self._runs.append_now(self._run, self._dialect.numbered(payloads))
        return Taken.ALL

    async def send_body(self, body: bytes) -> None:
        raise AssertionError("a run's plan always streams (Gateway.start_response)")

    async def end_stream(self, end: StreamEnd) -> None:
        await self._runs.append(self._run, self._dialect.numbered(end.payloads), end=True)

    async def fail(self, error: GatewayError) -> None:
        run = self._run
        if run.ending:
            return
        if isinstance(error, Draining) and run.background:
            await self._runs.end_with(run, INCOMPLETE, SHUTDOWN_REASON)
            return
        if run.next_seq == 0 and not run.background:
            run.early_error = error  # its creator answers the status (module doc)
        events = self._dialect.numbered(self._dialect.failure_events(error))
        await self._runs.append(run, events, end=True)
