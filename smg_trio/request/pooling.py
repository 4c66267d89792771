"""I/O. One pooling request (docs/pooling.md §1): its N inputs as N engine requests on one
worker, all inside ONE nursery, and its one JSON answer.

    pick a worker ─ nursery ─┬─ pool(input 0) ─┐
                             ├─ pool(input 1) ─┼─ every result ─ body ─ sink.send_body
                             └─ ...           ─┘

- Each task asks the worker's backend for one input's result (`backends/base.py: Pooler`).
  Leaving `pool` before its result arrived aborts that engine request, shielded and bounded,
  so whatever ends the nursery early aborts every input still running: the client leaving
  (its disconnect cancels the request's scope), the deadline, the drain, or one input failing.
- The first input to fail fails the request, as vLLM fails a batch on its first error: the
  nursery is cancelled (the others are aborted) and that failure goes to the sink.
- Nothing reaches the client before every result is in: the answer is one body.
- The worker is leased and released with the outcome (its circuit breaker learns from it), as
  a generation attempt's (request/retrying.py); a pooling request is not retried on another
  worker (nothing is lost by failing it: the client may send it again).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from functools import partial

import trio

from smg_trio.backends.base import Pooler
from smg_trio.core.pooling_inputs import PoolingPlan
from smg_trio.core.pooling_prepare import prepare_pooling, served_task
from smg_trio.errors import ClientError, ClientGone, GatewayError
from smg_trio.neutral.pooling import PooledOutput, PoolingRequest
from smg_trio.observability.request_record import CLIENT_GONE, RequestRecord
from smg_trio.request.preparation import off_loop_if_large
from smg_trio.request.served_model import ServedModel
from smg_trio.routing.retry import counts_against_worker
from smg_trio.routing.vocabulary import RoutingContext
from smg_trio.routing.workers import Outcome, WorkerPool
from smg_trio.sink import ClientSink
from smg_trio.wire.openai_pooling import decode_pooling_options
from smg_trio.wire.openai_responses import Usage


async def prepare_pooling_request(
    path: str, body: bytes, served: ServedModel, request_id: str
) -> PoolingPlan:
    """A pooling path's body → its plan for `served` (on a worker thread when large): the
    path's task checked against the model's (a 404 when it serves none of it), the model name
    checked, every input tokenized and checked (core/pooling_prepare.py)."""
    options = decode_pooling_options(path, body)
    served.check(options.model)
    served.check_task(served_task(path, served.pooler), path)
    return await off_loop_if_large(
        partial(
            prepare_pooling,
            path,
            options,
            served.prompt_model,
            served.pooler,
            request_id=request_id,
            now=dt.datetime.now(dt.UTC),
        ),
        body,
    )


class _Batch:
    """The results of one request's inputs, by input index, and its first failure."""

    def __init__(self, count: int) -> None:
        self.outputs: list[PooledOutput | None] = [None] * count
        self.failure: GatewayError | None = None

    async def pool_one(
        self, backend: Pooler, request: PoolingRequest, scope: trio.CancelScope
    ) -> None:
        try:
            self.outputs[request.input_index] = await backend.pool(request)
        except GatewayError as error:
            if self.failure is None:
                self.failure = error
            scope.cancel()  # the other inputs are aborted as their tasks leave `pool`

    def results(self) -> list[PooledOutput]:
        done = [output for output in self.outputs if output is not None]
        assert len(done) == len(self.outputs)  # every task returned or the batch failed
        return done


async def pool_inputs(backend: Pooler, requests: Sequence[PoolingRequest]) -> list[PooledOutput]:
    """Every input's result, in input order; raises the first input's failure (the others
    aborted). Cancellation aborts every input still running."""
    batch = _Batch(len(requests))
    async with trio.open_nursery() as nursery:
        for request in requests:
            nursery.start_soon(batch.pool_one, backend, request, nursery.cancel_scope)
    if batch.failure is not None:
        raise batch.failure
    return batch.results()


Answer = Callable[[Sequence[PooledOutput], int], bytes]
"""The response body from every input's result and the `created` time (pooling_render.py's
`pooling_body`, scoring.py's `scoring_body`)."""


async def run_pooling(
    requests: Sequence[PoolingRequest],
    answer: Answer,
    context: RoutingContext,
    pool: WorkerPool,
    sink: ClientSink,
    *,
    record: RequestRecord,
) -> None:
    """Serve `requests` (one per input) on one worker of `context`'s model and send `answer`
    of their results (see the module doc); scoring bodies are served this way too. Raises
    GatewayError when nothing was routed (no ready worker, a worker that cannot pool)."""
    worker = pool.pick(context, now=trio.current_time())
    backend = worker.backend
    if not isinstance(backend, Pooler):
        raise ClientError(
            f"worker {worker.name} ({worker.target.runtime.value} over "
            f"{worker.target.wire.value}) serves no pooling requests",
            param="model",
        )
    record.worker_picked(worker.name, worker.target.runtime.value)
    pool.on_routed(worker, trio.current_time())
    outcome = Outcome.NEUTRAL  # cut short (deadline, shutdown, client gone): nothing learnt
    try:
        if sink.gone_before_engine():
            record.aborted(CLIENT_GONE)
            return
        record.engine_sent()
        try:
            outputs = await pool_inputs(backend, requests)
            body = answer(outputs, int(time.time()))
        except GatewayError as error:
            outcome = Outcome.FAILURE if counts_against_worker(error) else Outcome.NEUTRAL
            record.failed(error)
            await sink.fail(error)
            return
        outcome = Outcome.SUCCESS
        prompt_tokens = sum(len(request.prompt_ids) for request in requests)
        record.assembled(Usage.of(prompt_tokens, 0), (), None)
        record.answered = True
        try:
            await sink.send_body(body)
        except ClientGone:
            record.aborted(CLIENT_GONE)
    finally:
        pool.release(worker, outcome, trio.current_time(), retried=False)
