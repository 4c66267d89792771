"""I/O. Mid-stream migration (docs/resilience.md §9): when a request's worker fails it after
output began, the request goes on on another worker, from where it was.

    run_request ── stream on worker A ──✗ EngineDead (A killed)
         │                                  │
         │            Migration.next_stream: may it move? pick B, release A, continue the plan
         └── stream on worker B (prompt + tokens so far, max_tokens less them) ── same assembler

`run_with_retries` makes one `Migration` per attempt; `run_request` asks it after a failure of
its backend stream (request/nursery.py). It says no, and the failure stands, when:

- the request already moved `limit` times (`--migration-limit`, 0: never);
- the failure is not the worker's (`routing.retry.counts_against_worker`: the engine died, went
  silent, became unreachable, refused as overloaded, or garbled its replies; not a refusal of
  the request's content, which would fail again anywhere);
- nothing reached the client and no token came: that is the pre-first-byte retry's case
  (request/retrying.py), which starts over on another worker;
- the request cannot go on exactly (`core.continuation.migration_refusal`): the reason goes on
  the request's log line;
- no other worker is ready, or the one picked cannot take the request (`finalize` refuses).

Otherwise the failed worker's lease is released as a failure (its breaker counts it), the new
worker is leased (`WorkerLease`: the attempt releases whichever it holds last), and the
continuation is built for it. The failed worker's engine requests were aborted when the stream
was left, or are known dead with their engine (backends/in_flight.py): nothing is left on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import trio

from smg_trio.core.continuation import continued, migration_refusal
from smg_trio.core.finalize import Finalized, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import BackendUnavailable, GatewayError
from smg_trio.observability.request_record import RequestRecord
from smg_trio.request.nursery import NextStream
from smg_trio.routing.retry import counts_against_worker
from smg_trio.routing.vocabulary import RoutingContext, Worker
from smg_trio.routing.workers import Outcome, WorkerPool


class WorkerLease:
    """The worker an attempt holds now: the one it was routed to, then each it moved to."""

    __slots__ = ("worker",)

    def __init__(self, worker: Worker) -> None:
        self.worker = worker


class Migration:
    """One attempt's `request.Failover` (see the module doc)."""

    def __init__(
        self,
        plan: GeneratePlan,
        context: RoutingContext,
        pool: WorkerPool,
        tokenizer: TokenizerLike,
        lease: WorkerLease,
        *,
        limit: int,
        tried: Sequence[str],
        sent: Callable[[], bool],
        record: RequestRecord,
    ) -> None:
        self._plan = plan
        self._context = context
        self._pool = pool
        self._tokenizer = tokenizer
        self._lease = lease
        self._left = limit
        self._tried = tuple(tried)  # workers earlier attempts failed on (pre-first-byte)
        self._sent = sent
        self._record = record

    async def next_stream(
        self, error: GatewayError, received: list[tuple[int, ...] | None]
    ) -> NextStream | None:
        await trio.lowlevel.checkpoint()
        if self._left <= 0 or not counts_against_worker(error):
            return None
        if not self._sent() and not any(received):
            return None  # nothing began: the pre-first-byte retry's case
        refusal = migration_refusal(self._plan)
        if refusal is not None:
            self._record.migration_refused = refusal
            return None
        failed = self._lease.worker
        pool = self._pool
        try:
            worker = pool.pick(
                self._context, now=trio.current_time(), exclude=(*self._tried, failed.name)
            )
        except BackendUnavailable:
            self._record.migration_refused = "no other worker is ready"
            return None
        try:
            finalized = finalize(self._plan, worker.target, self._tokenizer)
        except GatewayError as refused:  # its runtime cannot take the request
            self._record.migration_refused = f"{worker.name} cannot take it: {refused.message}"
            return None
        self._left -= 1
        now = trio.current_time()
        pool.release(failed, Outcome.FAILURE, now, retried=False)
        pool.on_routed(worker, now)
        self._lease.worker = worker
        self._record.migrating(error, worker.name, worker.target.runtime.value)
        continuation = continued(finalized, received)
        return NextStream(
            backend=worker.backend,
            finalized=Finalized(
                runtime=finalized.runtime, wire=finalized.wire, requests=continuation.requests
            ),
            at_length=continuation.at_length,
        )
