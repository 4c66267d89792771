"""I/O. Responses that outlive their connection (docs/client-apis.md §3.5): each runs in a
nursery the gateway owns, and appends its events to the store's event log; clients (the one
that created it, a resumed stream, another process) only subscribe to that log. This module is
the registry of this process's runs and their lifecycle; the rest of the concept lives in

    responses/run.py            one run's state: status, object, window of events, scope
    responses/log_sink.py       `LogSink`, what a run's generation writes to
    responses/flusher.py    `EventLogFlusher`, pending events → the event log
    responses/followers.py  `RunFollowers`, subscriptions: the window, else the log

    ResponseRuns.serve ─┬─ the runs' nursery: one task per run, `Gateway.handle` writing
                        │   through a `LogSink` (numbered events → event log → local tails)
                        ├─ the flusher (EventLogFlusher.flush_forever)
                        └─ housekeeping every HEARTBEAT_S: refresh this process's open runs,
                           apply cancels other processes asked for, end the runs of dead
                           processes `incomplete`, drop the events past their retention

- A run's generation is an ordinary request (`Gateway.handle`: lifecycle, deadline, retries,
  migration, metrics, log line); only its sink differs. So the drain treats it as any request:
  it may finish within `--drain-timeout-s`, then it is cancelled and, being a background
  response, ends `incomplete` (reason `gateway_shutdown`); a resumable stream ends as a
  foreground stream does (the `error` and `response.failed` events).
- `start` is the one place a run begins; `request/run_start.py` is its only caller
  (`admit_response` admits the create: its body, a tenant's budget; `AdmittedResponse.start`
  begins it). A transport other than HTTP would start runs and follow them through the same
  calls and `follow`.
- An append goes to the run's window in memory (its caught-up local tails get it at once
  from the appending task, the others wake) and to the log at the next flush: one
  transaction per FLUSH_INTERVAL_S for every run of the process; a run's last append waits
  for the log. A local tail reads the run's last LOCAL_WINDOW events from memory; a tail of a
  run owned by another process polls the log every TAIL_POLL_S.
- Cancelling a run cancels its scope: leaving the backend stream aborts its engine requests.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import msgspec
import trio

from smg_trio.core.run_events import (
    ABANDONED_REASON,
    CANCELLED,
    INCOMPLETE,
    SHUTDOWN_REASON,
    ending,
)
from smg_trio.errors import ClientError, GatewayError
from smg_trio.observability.metrics import GatewayMetrics
from smg_trio.responses.flusher import EventLogFlusher
from smg_trio.responses.followers import TAIL_POLL_S, RunFollowers, SendEvents
from smg_trio.responses.log_sink import LogSink
from smg_trio.responses.run import LocalRun, SendNow, Tail
from smg_trio.responses.store.event_log import EventLog, Run

# The documented logger name (docs/observability.md §2), kept where the module moved.
RESPONSE_RUNS_LOGGER: Final = "smg_trio.response_runs"
logger = logging.getLogger(RESPONSE_RUNS_LOGGER)

HEARTBEAT_S: Final = 1.0
STALE_AFTER_S: Final = 10.0
"""A run whose owner has not refreshed it for this long is ended by whoever finds it."""
CANCEL_WAIT_S: Final = 5.0
"""How long `POST .../cancel` waits for the run to end before answering its state."""
END_GRACE_S: Final = 2.0
"""Shielded bound for writing a run's last event after its generation was cancelled."""
DEFAULT_RETENTION_S: Final = 3600.0
DEFAULT_EVENTS_MAX: Final = 65536
DEFAULT_RESUME_GRACE_S: Final = 30.0

Generate = Callable[[LogSink], Awaitable[None]]
_decode = msgspec.json.decode


class SynchronousResponse(ClientError):
    """`cancel` of a response that was not created in the background (OpenAI's 400)."""

    def __init__(self) -> None:
        super().__init__("Cannot cancel a synchronous response.", param="response_id")


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
        self.owner = uuid.uuid4().hex  # this process, for its runs' rows
        self._local: dict[str, LocalRun] = {}
        self._nursery: trio.Nursery | None = None
        self._flusher = None if log is None else EventLogFlusher(log, keep=events_max)
        self._followers = RunFollowers(
            self._local, log, events_max=events_max, resume_grace_s=resume_grace_s
        )

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
                if self._flusher is not None:
                    nursery.start_soon(self._flusher.flush_forever)
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
                    self._log_stale_output()
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

    def _log_stale_output(self) -> None:
        """A run whose output grew since the log got its object (the flusher rewrites it at
        most every OUTPUT_LOG_INTERVAL_S): flushed again, so another process's retrieve sees
        it within a heartbeat even when the run's events stopped."""
        flusher = self._flusher
        if flusher is None:
            return
        for run in self._local.values():
            if not run.ending and run.output_unlogged:
                flusher.mark(run)
                flusher.want()

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
        Only `run_start.AdmittedResponse` (request/) calls this (module doc). `creator_follows`:
        the caller is subscribed from the start and calls `unsubscribe` when its stream ends."""
        self.check_accepting(background=background)
        log, nursery = self.log, self._nursery
        assert log is not None
        assert nursery is not None
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

    def check_accepting(self, *, background: bool) -> None:
        """The 400 of a run this gateway cannot keep (no store), before anything is charged."""
        if not self.accepting:
            raise ClientError(
                "this gateway keeps no responses (start it with --response-store)",
                param="background" if background else "store",
            )

    async def _run(self, run: LocalRun, generate: Generate) -> None:
        sink = LogSink(self, run)
        counted = "queued"
        try:
            with run.scope:
                if not run.background and not run.subscribers:
                    run.scope.deadline = trio.current_time() + self._followers.resume_grace_s
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
                run.release_caught_up()
                if self._local.get(run.id) is run:  # (a new run may have its id already)
                    del self._local[run.id]
                run.done.set()

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
        run.take_state(events, end=True)
        run.pending.extend(events)
        flusher = self._flusher
        assert flusher is not None  # (a run begins only with a log)
        flusher.mark(run)
        try:
            await flusher.flush()
        finally:
            run.show(first, events)
            run.ended = True
            run.release_caught_up()
            run.wake_followers()

    def append_now(self, run: LocalRun, events: Sequence[tuple[bytes, bytes]]) -> None:
        """Numbered events onto the run: its window and its local followers at once, the log
        at the next flush (FLUSH_INTERVAL_S)."""
        if run.ending:
            return
        first = run.next_seq
        run.take_state(events, end=False)
        run.hand_over(run.show(first, events))
        run.pending.extend(events)
        flusher = self._flusher
        assert flusher is not None  # (a run begins only with a log)
        flusher.mark(run)
        run.wake_followers()
        flusher.want()

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

    async def flush(self) -> None:
        """Write every run's pending events and state to the log now (`EventLogFlusher`)."""
        assert self._flusher is not None
        await self._flusher.flush()

    # Subscriptions (responses/followers.py), here for the transports that follow runs.

    async def first_event(self, run: LocalRun) -> None:
        """`RunFollowers.first_event`: a resumable stream's early failure raises here."""
        await self._followers.first_event(run)

    async def open_tail(self, run_id: str, after: int) -> Tail | None:
        """`RunFollowers.open_tail`: None when no run has the id, a 400 when too old."""
        return await self._followers.open_tail(run_id, after)

    async def follow(self, tail: Tail, send: SendEvents, send_now: SendNow | None = None) -> None:
        """`RunFollowers.follow`: the run's events after `tail.after`, then the live ones."""
        await self._followers.follow(tail, send, send_now)

    def subscribe(self, run: LocalRun) -> None:
        self._followers.subscribe(run)

    def unsubscribe(self, run: LocalRun) -> None:
        self._followers.unsubscribe(run)
