"""I/O. One request's attempts: pick a worker, run the request there, and while nothing reached
the client, try another worker after a failure that says the first could not take it
(docs/routing.md §3).

    attempt 1 ─ pick ─ finalize ─ run_request(sink = FirstByteGuard) ─┬─ done
                                                                      └─ held error (nothing sent)
    backoff (jittered, within the deadline) ─ attempt 2 on another worker ─ ... ─ last attempt

- `FirstByteGuard` stands between the request and the client's sink. It forwards everything and
  remembers whether anything was sent; a retryable failure (`routing.retry.retryable`) while
  nothing was sent is held instead of forwarded, which is what makes the request retryable.
  The last attempt's guard holds nothing, so its failure reaches the client as before.
- Each attempt leases its worker from the pool and releases it with the outcome, which feeds
  the worker's circuit breaker; the lease is released on every exit, cancellation included.
- A retry that would end after the deadline, or finds no other candidate, ends the request with
  the held failure instead.
- After output began, a worker failure is no longer retried but may be migrated: the attempt's
  `Migration` moves the request to another worker, from where it was (request/migration.py); the
  attempt then releases the worker it holds last.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence

import trio

from smg_trio.core.finalize import finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.stream_end import StreamEnd
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import BackendUnavailable, ClientGone, GatewayError
from smg_trio.handoff import Taken
from smg_trio.observability.request_record import RequestRecord
from smg_trio.request.client_aborts import ClientAbort
from smg_trio.request.migration import Migration, WorkerLease
from smg_trio.request.nursery import run_request
from smg_trio.routing.retry import (
    DEFAULT_MIGRATION_LIMIT,
    backoff_s,
    counts_against_worker,
    retryable,
)
from smg_trio.routing.vocabulary import RoutingContext
from smg_trio.routing.workers import Outcome, WorkerPool
from smg_trio.sink import ClientSink


class FirstByteGuard:
    """A `ClientSink` in front of the client's: holds a retryable failure while nothing was sent."""

    def __init__(self, sink: ClientSink, *, may_hold: bool) -> None:
        self._sink = sink
        self._may_hold = may_hold
        self.sent = False
        self.client_gone = False
        self.failure: GatewayError | None = None
        self.held = False

    def gone_before_engine(self) -> bool:
        return self._sink.gone_before_engine()

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        self.sent = True
        try:
            await self._sink.send_chunks(payloads)
        except ClientGone:
            self.client_gone = True
            raise

    def send_chunks_now(self, payloads: Sequence[bytes]) -> Taken:
        sent = self._sink.send_chunks_now(payloads)
        if sent is not Taken.REFUSED:
            self.sent = True
        return sent

    async def send_body(self, body: bytes) -> None:
        self.sent = True
        try:
            await self._sink.send_body(body)
        except ClientGone:
            self.client_gone = True
            raise

    async def end_stream(self, end: StreamEnd) -> None:
        self.sent = True
        await self._sink.end_stream(end)

    async def fail(self, error: GatewayError) -> None:
        self.failure = error
        if self._may_hold and not self.sent and retryable(error):
            self.held = True
            return
        await self._sink.fail(error)

    def has_sent(self) -> bool:
        """Whether anything reached the client's sink (a migration's test, request/migration.py)."""
        return self.sent

    def outcome(self) -> Outcome:
        if self.failure is not None:
            return Outcome.FAILURE if counts_against_worker(self.failure) else Outcome.NEUTRAL
        return Outcome.NEUTRAL if self.client_gone else Outcome.SUCCESS


async def run_with_retries(
    plan: GeneratePlan,
    context: RoutingContext,
    pool: WorkerPool,
    tokenizer: TokenizerLike,
    sink: ClientSink,
    *,
    max_retries: int,
    migration_limit: int = DEFAULT_MIGRATION_LIMIT,
    deadline: float,
    rng: random.Random,
    record: RequestRecord,
    abort: ClientAbort | None = None,
) -> None:
    """Serve `plan` to `sink` on up to 1 + `max_retries` workers (see the module doc), each
    attempt moving mid-stream at most `migration_limit` times (request/migration.py).

    Raises GatewayError only when nothing was routed at all (no ready worker: 503, or the
    request does not fit the picked worker's runtime: 400)."""
    tried: list[str] = []
    held: GatewayError | None = None
    for attempt in range(max_retries + 1):
        if held is not None:
            delay = backoff_s(attempt, rng)
            if trio.current_time() + delay >= deadline:
                break
            await trio.sleep(delay)
        try:
            worker = pool.pick(context, now=trio.current_time(), exclude=tried)
        except BackendUnavailable:
            if held is None:
                raise
            break
        record.worker_picked(worker.name, worker.target.runtime.value)
        finalized = finalize(plan, worker.target, tokenizer)
        guard = FirstByteGuard(sink, may_hold=attempt < max_retries)
        pool.on_routed(worker, trio.current_time())
        lease = WorkerLease(worker)  # a migration moves it (request/migration.py)
        failover = (
            None
            if migration_limit <= 0
            else Migration(
                plan,
                context,
                pool,
                tokenizer,
                lease,
                limit=migration_limit,
                tried=tried,
                sent=guard.has_sent,
                record=record,
            )
        )
        outcome = Outcome.NEUTRAL  # cut short (deadline, shutdown): nothing learnt
        try:
            await run_request(
                plan,
                finalized,
                worker.backend,
                tokenizer,
                guard,
                created=int(time.time()),
                record=record,
                failover=failover,
                abort=abort,
            )
            outcome = guard.outcome()
        finally:
            pool.release(lease.worker, outcome, trio.current_time(), retried=guard.held)
        if not guard.held:
            return
        held = guard.failure
        record.retrying()  # the held failure is not the request's outcome (yet)
        tried.append(worker.name)
        if lease.worker is not worker:
            tried.append(lease.worker.name)
    assert held is not None
    await sink.fail(held)
