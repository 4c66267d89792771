"""I/O. The reference gRPC engines' continuous batching: one asyncio task steps every active
request once per step (one token each), the Generate handlers wait on their request's outbox.

An Embed request (a pooling model's) is a `PoolJob`: it joins the batch like the others and its
vector is computed at the step that takes it in (no tokens are generated for it).

Requests join the batch only at a step (up to `max_batch` active; the rest wait in arrival
order), so concurrent requests share steps. A step runs at most every `step_seconds` and always
yields to the event loop, so handlers send while the next step waits. Everything happens on
one event loop: removing a request (its stream was cancelled, or the Abort RPC named it) is
synchronous, so no step can generate for it afterwards; `tokens_after_abort` counts the
tokens a step generates for a removed request and must stay 0.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from dataclasses import dataclass

from smg_trio.engines.generation import Generation
from smg_trio.engines.grpc_policy import (
    AbortedByRpc,
    Delivery,
    Ending,
    EngineView,
    JobSpec,
    PoolSpec,
    Rejected,
    ServedModel,
    trimmed_length,
)
from smg_trio.engines.pooling import pooled_values
from smg_trio.engines.received_log import ReceivedLog
from smg_trio.engines.wire_adapter import BLOCK_SIZE, Counters
from smg_trio.wire.grpc_responses import GrpcStatus


@dataclass
class GrpcCounters(Counters):
    """The ZMQ engines' counters plus what only a gRPC engine sees."""

    requests_cancelled: int = 0  # streams the client cancelled (RST_STREAM) mid-request
    largest_batch: int = 0  # most requests one step has served


class Job:
    """One admitted request: its generation and the deliveries its stream has not read yet."""

    def __init__(self, spec: JobSpec, model: ServedModel) -> None:
        self.spec = spec
        self.generation = Generation(
            model.engine.source, spec.prompt_ids, spec.key, spec.rules, spec.token_rules
        )
        self.outbox: asyncio.Queue[Delivery] = asyncio.Queue()
        self.shown: list[int] = []  # the output as the wire shows it (a trimmed stop removed)
        self.removed = False  # cancelled or aborted: no step may generate for it any more

    def step(self) -> Delivery:
        step = self.generation.step()
        ending: Ending | None = step.finish
        if self.spec.stops is not None:
            ending = self.spec.stops.check(self.generation.output_ids, step.finish) or ending
        sent = len(self.shown)
        self.shown.append(step.token_id)
        if ending is None:
            return Delivery((step.token_id,), len(self.generation.output_ids))
        if self.spec.trim_matched_stop:
            del self.shown[max(0, len(self.shown) - trimmed_length(ending)) :]
        return Delivery(
            new_ids=tuple(self.shown[sent:]),
            generated=len(self.generation.output_ids),
            ending=ending,
            output_ids=tuple(self.shown),
        )


class PoolJob:
    """One admitted Embed request: pooled at the step that takes it into the batch."""

    def __init__(self, spec: PoolSpec) -> None:
        self.spec = spec
        self.result: asyncio.Future[tuple[float, ...] | AbortedByRpc] = (
            asyncio.get_running_loop().create_future()
        )
        self.removed = False


class Scheduler:
    def __init__(self, model: ServedModel, *, step_seconds: float, max_batch: int) -> None:
        self.model = model
        self.step_seconds = step_seconds
        self.max_batch = max_batch
        self.counters = GrpcCounters()
        self.received = ReceivedLog()
        self.active: dict[str, Job | PoolJob] = {}
        self.waiting: collections.OrderedDict[str, Job | PoolJob] = collections.OrderedDict()
        self.serving = True
        self.started_at = time.time()
        self._work = asyncio.Event()

    def submit(self, spec: JobSpec) -> Job:
        job = Job(spec, self.model)
        self._queue(job)
        return job

    def submit_pooling(self, spec: PoolSpec) -> PoolJob:
        """An Embed request: its vector comes at the step that takes it into the batch."""
        job = PoolJob(spec)
        self._queue(job)
        return job

    def _queue(self, job: Job | PoolJob) -> None:
        request_id = job.spec.request_id
        if request_id in self.active or request_id in self.waiting:
            raise Rejected(
                GrpcStatus.INVALID_ARGUMENT, f"request id {request_id} is already running"
            )
        self.waiting[request_id] = job
        self.counters.requests_added += 1
        self._update_gauges()
        self._work.set()

    def abort(self, request_id: str) -> bool:
        """The Abort RPC: end the request now and tell its stream."""
        self.counters.abort_ids_received += 1
        job = self._remove(request_id)
        if job is None:
            return False
        self.counters.requests_aborted += 1
        if isinstance(job, PoolJob):
            job.result.set_result(AbortedByRpc())
            return True
        shown = tuple(job.shown)
        generated = len(job.generation.output_ids)
        job.outbox.put_nowait(Delivery((), generated, AbortedByRpc(), shown))
        return True

    def drop(self, job: Job | PoolJob) -> None:
        """The job's stream ended (finished, failed or cancelled): forget it if still running."""
        if self._remove(job.spec.request_id) is job:
            self.counters.requests_cancelled += 1

    def _remove(self, request_id: str) -> Job | PoolJob | None:
        job = self.active.pop(request_id, None) or self.waiting.pop(request_id, None)
        if job is not None:
            job.removed = True
            self._update_gauges()
        return job

    async def run(self) -> None:
        """Step forever (until cancelled)."""
        loop = asyncio.get_running_loop()
        next_step = loop.time()
        while True:
            if not self.active and not self.waiting:
                self._work.clear()
                await self._work.wait()
            await asyncio.sleep(max(0.0, next_step - loop.time()))
            self._admit()
            if self.active:
                self._step()
            next_step = loop.time() + self.step_seconds

    def _admit(self) -> None:
        while self.waiting and len(self.active) < self.max_batch:
            request_id, job = self.waiting.popitem(last=False)
            self.active[request_id] = job
        self._update_gauges()

    def _step(self) -> None:
        batch = list(self.active.values())
        counters = self.counters
        counters.largest_batch = max(counters.largest_batch, len(batch))
        for job in batch:
            if isinstance(job, PoolJob):
                del self.active[job.spec.request_id]
                counters.requests_finished += 1
                job.result.set_result(self._pool(job.spec))
                continue
            delivery = job.step()
            counters.tokens_generated += 1
            if job.removed:
                counters.tokens_after_abort += 1
            if delivery.ending is not None:
                del self.active[job.spec.request_id]
                counters.requests_finished += 1
            job.outbox.put_nowait(delivery)
        counters.steps += 1
        self._update_gauges()

    def _pool(self, spec: PoolSpec) -> tuple[float, ...]:
        engine = self.model.engine  # Embed pools with the model's defaults (docs/wire.md §C.8)
        return pooled_values(
            spec.prompt_ids,
            task="embed",
            hidden_size=engine.hidden_size,
            num_labels=engine.num_labels,
        )

    def _update_gauges(self) -> None:
        self.counters.requests_active = len(self.active)
        self.counters.requests_waiting = len(self.waiting)

    def view(self) -> EngineView:
        used = sum(
            math.ceil((len(job.spec.prompt_ids) + _generated(job)) / BLOCK_SIZE)
            for job in self.active.values()
        )
        return EngineView(
            model=self.model,
            running=len(self.active),
            waiting=len(self.waiting),
            used_blocks=used,
            started_at=self.started_at,
            now=time.time(),
            serving=self.serving,
        )


def _generated(job: Job | PoolJob) -> int:
    return 0 if isinstance(job, PoolJob) else len(job.generation.output_ids)
