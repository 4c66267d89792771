"""I/O. The gateway's request entry point, shared by every front end (HTTP and WebSocket).

`Gateway.handle(path, body, sink, arrival)` decodes and validates the body and prepares it
(`arrival`, request/arrival.py: who sent it and how); admission control then lets it through,
queues it or turns it away (429), and `retrying.run_with_retries` finalizes it for the worker
the `routing.workers.WorkerPool` picks and runs the per-request nursery, on another worker if
the first could not take it before any byte was sent (docs/routing.md), all under the request
deadline. `Gateway.handle_admitted` does the same for a Responses run that request/run_start.py
admitted. A request that fails before it reaches a
backend raises a GatewayError for the front end to hand to its sink; anything later reaches
`sink.fail` directly. Either way the sink's state decides what the error becomes (an HTTP
status or a final event).

- `model` must be one of the served names (`request/served_models.py`, `--served-model-name`,
  `[[models]]`); a missing one means the first model. Any other is vLLM's 404 (`The model `X`
  does not exist.`, type `NotFoundError`, param `model`), with OpenAI's code `model_not_found`,
  on every path. The named model (`ServedModel`) is picked once per request, before it is
  prepared: its tokenizer, template and parsers prepare it, and only its workers are routed
  to (docs/fleet.md §4).
- /v1/tokenize and /v1/detokenize are answered here too (a whole JSON body through the sink),
  so HTTP and the WebSocket protocol serve them alike.
- Every request is admitted into the gateway's `LiveRequests` (`live_requests`, request/live_requests.py)
  for its lifetime: refused with 503 `draining` once a drain began, ended with that error if
  still running at the drain timeout, and given keep-alives while its stream is silent
  (docs/resilience.md §4–§5).
- The request id (the client's `x-request-id`, else a fresh one) is the plan's id, so it is the
  response id and the engine request id's stem.
- Every request handled here is observed (`request/observation.py`): its `RequestRecord`, its
  metrics, its log line (with its request id on every line) and its trace (docs/observability.md
  §2). Its body is prepared off the event loop when large (`request/preparation.py`), and after
  a large body the freed heap goes back to the system (`heap.HeapReleaser`, docs/limits.md §2).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from smg_trio.core.endpoint_renderers import response_id
from smg_trio.core.frontend_options import DEFAULT_FRONTEND, FrontendOptions
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.prepare import PromptModel
from smg_trio.errors import BackendUnavailable, ClientError
from smg_trio.model.folder import ModelDir
from smg_trio.model.image_workers import ImageWorkers
from smg_trio.neutral.pooling import GENERATION_MODEL, ModelPooler, Task
from smg_trio.observability.metrics import GatewayMetrics
from smg_trio.observability.request_record import RequestRecord
from smg_trio.observability.tenant_metrics import TenantMetrics
from smg_trio.request.arrival import Arrival
from smg_trio.request.endpoints import POOLING_PATHS, RESPONSES_PATH, SCORING_PATHS, TOKEN_PATHS
from smg_trio.request.heap import RELEASE_HEAP_AFTER_BYTES, HeapReleaser
from smg_trio.request.images import ImageLimits, image_inputs_by_model
from smg_trio.request.live_requests import LiveRequest, LiveRequests
from smg_trio.request.memory_budget import (
    MemoryBudget,
    Reservation,
    default_budget_bytes,
    prompt_bytes,
)
from smg_trio.request.observation import observed_request
from smg_trio.request.pooled_work import prepare_pooled_work
from smg_trio.request.pooling import run_pooling
from smg_trio.request.preparation import answer_token_request, prepare_request
from smg_trio.request.retrying import run_with_retries
from smg_trio.request.served_model import ServedModel, served_model
from smg_trio.request.served_models import ServedModels
from smg_trio.responses.runs import (
    DEFAULT_EVENTS_MAX,
    DEFAULT_RESUME_GRACE_S,
    DEFAULT_RETENTION_S,
    ResponseRuns,
)
from smg_trio.responses.store.service import ResponsesService
from smg_trio.responses.store.stores import ResponseStore
from smg_trio.routing.admission import Admission
from smg_trio.routing.retry import DEFAULT_MAX_RETRIES, DEFAULT_MIGRATION_LIMIT
from smg_trio.routing.vocabulary import RoutingContext
from smg_trio.routing.workers import NO_READY_WORKER, WorkerPool
from smg_trio.sink import ClientSink
from smg_trio.tenancy.api_keys import Tenant
from smg_trio.tenancy.gate import TenantGate, TenantReservation

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing is on (docs/observability.md §4)
    from smg_trio.observability.tracing import RequestTracer

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AdmittedRun:
    """A Responses run's body as its create admitted it: the plan and user, prepared, and the
    tenant's budget `reserved` for it (request/run_start.py)."""

    plan: GeneratePlan
    user: str | None
    reserved: TenantReservation


class Gateway:
    def __init__(
        self,
        model: ModelDir,
        pool: WorkerPool,
        *,
        request_timeout_s: float,
        served_model_names: tuple[str, ...] = (),
        admission: Admission | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        migration_limit: int = DEFAULT_MIGRATION_LIMIT,
        rng: random.Random | None = None,
        tool_call_parser: str | None = None,
        reasoning_parser: str | None = None,
        memory_budget: MemoryBudget | None = None,
        metrics: GatewayMetrics | None = None,
        log_requests: bool = False,
        max_log_len: int | None = None,
        tracer: RequestTracer | None = None,
        response_store: ResponseStore | None = None,
        stream_interval: int = 1,
        tenant_gate: TenantGate | None = None,
        response_retention_s: float = DEFAULT_RETENTION_S,
        response_events_max: int = DEFAULT_EVENTS_MAX,
        resume_grace_s: float = DEFAULT_RESUME_GRACE_S,
        more_models: Sequence[ServedModel] = (),
        image_limits: ImageLimits | None = None,
        pooler: ModelPooler = GENERATION_MODEL,
        image_workers: ImageWorkers | None = None,
        mm_device_do_normalize: bool | None = None,
        frontend: FrontendOptions = DEFAULT_FRONTEND,
    ) -> None:
        """`model` under `served_model_names` with the parsers is the first model;
        `more_models` the further ones (docs/fleet.md §4), their workers in `pool` too;
        `pooler`: the first model's tasks and pooler (docs/pooling.md §4);
        `mm_device_do_normalize`: the engines' setting (docs/images.md §4.2; None: vLLM's
        default)."""
        first = served_model(
            model,
            served_model_names,
            tool_call_parser=tool_call_parser,
            reasoning_parser=reasoning_parser,
            stream_interval=stream_interval,
            pooler=pooler,
            frontend=frontend,
        )
        self.model = model
        self.prompt_model: PromptModel = first.prompt_model
        self.pool = pool
        self.request_timeout_s = request_timeout_s
        self.admission = admission or Admission()
        self.max_retries = max_retries
        self.migration_limit = migration_limit  # docs/resilience.md §9
        self._rng = rng or random.Random()
        self.live_requests = LiveRequests()
        # /v1/models and the request's `model` (request/served_models.py)
        self.models = ServedModels((first, *more_models), created=int(time.time()))
        folders = {served.key: served.folder for served in (first, *more_models)}
        self.images = image_inputs_by_model(  # a chat request's images (docs/images.md)
            folders, image_limits, image_workers, mm_device_do_normalize
        )
        self.memory_budget = memory_budget or MemoryBudget(default_budget_bytes())
        self.heap_releaser = HeapReleaser()  # after large bodies (docs/limits.md §2)
        self.metrics = metrics or GatewayMetrics(pool)
        self.log_requests = log_requests  # --log-requests: request bodies and texts in the log
        self.max_log_len = max_log_len  # --max-log-len: characters of each logged (None: all)
        self.tracer = tracer  # --otlp-endpoint; None: tracing off, nothing traced
        self.responses = ResponsesService(response_store)  # /v1/responses' store (--response-store)
        # Tenants' budgets (--api-keys, --state-url; docs/fleet.md §2)
        self.tenant_gate = tenant_gate or TenantGate(TenantMetrics(self.metrics.registry))
        # Responses that outlive their connection (docs/client-apis.md §3.5); `serve` runs
        # `runs.serve`, the nursery that holds them.
        self.runs = ResponseRuns(
            None if response_store is None else response_store.events,
            self.metrics,
            retention_s=response_retention_s,
            events_max=response_events_max,
            resume_grace_s=resume_grace_s,
        )

    @property
    def ready(self) -> bool:
        """Ready to take requests: a worker is ready and the gateway is not draining."""
        return self.pool.ready and not self.live_requests.draining

    def unready_reason(self) -> str:
        return "the gateway is draining" if self.live_requests.draining else "no worker is ready"

    async def handle(
        self, path: str, body: bytes, sink: ClientSink, arrival: Arrival | None = None
    ) -> None:
        """Serve one request to `sink`; `arrival` says who sent it and how (a fresh request id
        and nothing else when None).

        A request that fails before it reaches a backend (a bad body, no ready worker) raises
        GatewayError, nothing having been sent; every later failure, the deadline included,
        ends the response through `sink.fail`. The body's bytes are held from the memory
        budget (the arrival's reservation, else one taken here), and the prompt's ids are added
        once prepared (docs/limits.md §4).
        """
        await self._serve(path, body, sink, arrival or Arrival(), None)

    async def handle_admitted(
        self, body: bytes, sink: ClientSink, arrival: Arrival, run: AdmittedRun
    ) -> None:
        """`handle` for a Responses run `request/run_start.py` admitted: its body already
        prepared and its tenant's budget already taken (used here, not taken again)."""
        await self._serve(RESPONSES_PATH, body, sink, arrival, run)

    async def _serve(
        self,
        path: str,
        body: bytes,
        sink: ClientSink,
        arrival: Arrival,
        run: AdmittedRun | None,
    ) -> None:
        try:
            with observed_request(self, path, body, arrival) as record:
                logger.debug("%s: started", path)
                try:
                    reservation = arrival.body_reservation
                    with (
                        self.live_requests.admit(sink) as live,
                        # The caller's reservation (held since the body was read), else ours.
                        nullcontext(reservation)
                        if reservation is not None
                        else self.memory_budget.reserve(len(body)) as held,
                    ):
                        await self._handle(path, body, sink, record, arrival, live, held, run)
                    await live.end_if_cut_short(record, self.request_timeout_s)
                finally:
                    logger.debug("%s: finished", path)
        finally:
            if len(body) >= RELEASE_HEAP_AFTER_BYTES:
                await self.heap_releaser.release()

    async def _handle(
        self,
        path: str,
        body: bytes,
        sink: ClientSink,
        record: RequestRecord,
        arrival: Arrival,
        live: LiveRequest,
        reservation: Reservation,
        run: AdmittedRun | None,
    ) -> None:
        served = self.models.for_body(body, arrival.tenant)
        record.model = served.key  # metrics and the log line say it (docs/fleet.md §4)
        if path in POOLING_PATHS or path in SCORING_PATHS:
            await self._pool(path, body, sink, record, arrival, live, reservation, served)
            return
        if path not in TOKEN_PATHS:
            served.check_task(Task.GENERATE, path)
        if path in TOKEN_PATHS:
            await sink.send_body(
                await answer_token_request(
                    path,
                    body,
                    served.prompt_model,
                    served.folder.tokenizer,
                    served.check,
                    self.images[served.key],
                )
            )
            return
        deadline = trio.current_time() + self.request_timeout_s
        live.scope.deadline = deadline  # past it, `live.timed_out` (handled in `_serve`)
        service = arrival.responses or self.responses
        if run is None:
            plan, user = await self._prepared(served, path, body, record.request_id, service)
            if plan.responses is not None and plan.responses.background:
                # Only a run (`request/run_start.py`: HTTP's POST /v1/responses) serves one; any
                # other way in would serve it in the foreground: refused, not ignored.
                raise ClientError(
                    "background responses are created with POST /v1/responses over HTTP",
                    param="background",
                )
        else:
            plan, user = run.plan, run.user
        sink = service.storing(plan, sink)
        live.streaming = plan.stream
        self.live_requests.name(live, response_id(plan))  # abort by id (request/client_aborts.py)
        prompt_ids = [part.ids for part in plan.prompts]
        # The prompt's ids and its images' tensors and sources (docs/images.md §3, §5.1) count
        # against the budget.
        media_bytes = sum(f.nbytes + len(f.source) for f in plan.media)
        reservation.grow(prompt_bytes(prompt_ids) + media_bytes)
        context = RoutingContext(
            model=plan.model,
            model_key=self.model_key(served),
            prompt_ids=plan.prompt_ids,
            media=tuple(feature.span for feature in plan.media),  # images by their identifiers
            session_key=arrival.session_key or user,
        )
        if not self.pool.ready_for(context.model_key):
            raise BackendUnavailable(NO_READY_WORKER)  # 503 now, not after a queue wait
        # The tenant's budget (docs/fleet.md §2): a slot, a request and the prompt tokens now
        # (a run's were taken at its create), the output tokens when the request ends; then
        # the gateway-wide admission.
        prompt_tokens = sum(len(ids) for ids in prompt_ids)
        async with (
            self.tenant_gate.admitted(arrival.tenant, prompt_tokens, record)
            if run is None
            else run.reserved.used(record),
            self.admission.admitted(),
        ):
            await run_with_retries(
                plan,
                context,
                self.pool,
                served.prompt_model.tokenizer,
                sink,
                max_retries=self.max_retries,
                migration_limit=self.migration_limit,
                deadline=deadline,
                rng=self._rng,
                record=record,
                abort=live.abort,
            )

    async def _pool(
        self,
        path: str,
        body: bytes,
        sink: ClientSink,
        record: RequestRecord,
        arrival: Arrival,
        live: LiveRequest,
        reservation: Reservation,
        served: ServedModel,
    ) -> None:
        """A pooling or scoring path (docs/pooling.md §1, §8): prepared, admitted as a
        generation request is (tenant budget with its prompt tokens, admission), then its
        inputs pooled on one worker (request/pooling.py)."""
        work = await prepare_pooled_work(path, body, served, record.request_id)
        live.scope.deadline = trio.current_time() + self.request_timeout_s
        prompts = work.prompts
        reservation.grow(prompt_bytes([list(ids) for ids in prompts]))
        context = RoutingContext(
            model=work.model,
            model_key=self.model_key(served),
            prompt_ids=prompts[0],
            session_key=arrival.session_key or work.user,
        )
        if not self.pool.ready_for(context.model_key):
            raise BackendUnavailable(NO_READY_WORKER)
        async with (
            self.tenant_gate.admitted(arrival.tenant, work.prompt_tokens, record),
            self.admission.admitted(),
        ):
            await run_pooling(work.requests, work.answer, context, self.pool, sink, record=record)

    async def prepare(
        self,
        path: str,
        body: bytes,
        request_id: str,
        service: ResponsesService,
        tenant: Tenant | None = None,
    ) -> tuple[GeneratePlan, str | None]:
        """The body's plan, prepared for the model it names (if `tenant` may use it), and its
        `user`."""
        served = self.models.for_body(body, tenant)
        return await self._prepared(served, path, body, request_id, service)

    async def _prepared(
        self,
        served: ServedModel,
        path: str,
        body: bytes,
        request_id: str,
        service: ResponsesService,
    ) -> tuple[GeneratePlan, str | None]:
        return await prepare_request(
            path,
            body,
            request_id,
            served.prompt_model,
            served.check,
            service,
            self.images[served.key],
        )

    def model_key(self, served: ServedModel) -> str | None:
        """What narrows the pool to `served`'s workers: its key, or None when the gateway
        serves one model (every worker is its own)."""
        return served.key if len(self.models.models) > 1 else None

    def ready_for(self, body: bytes) -> bool:
        """A worker of the model `body` names can take it (the 404 for an unknown name)."""
        return self.pool.ready_for(self.model_key(self.models.for_body(body)))
