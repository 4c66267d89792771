"""I/O. The gateway's request entry point, shared by every front end (HTTP and WebSocket).

`Gateway.handle(path, body, sink)` decodes and validates the body, prepares and finalizes the
request for the worker its `routing.workers.WorkerPool` picks, and runs the per-request
nursery under the request deadline. A request that fails before it reaches a backend raises a
GatewayError for the front end to hand to its sink; anything later reaches `sink.fail` directly.
Either way the sink's state decides what the error becomes (an HTTP status or a final event).

- `model` must be one of the served names (`--served-model-name`, repeatable); a missing one
  means the first. Any other is vLLM's 404 (`The model `X` does not exist.`, type
  `NotFoundError`, param `model`), with OpenAI's code `model_not_found`, on every path.
- /v1/tokenize and /v1/detokenize are answered here too (a whole JSON body through the sink),
  so HTTP and the WebSocket protocol serve them alike.
- The request id (the client's `x-request-id`, else a fresh one) is the plan's id, so it is the
  response id and the engine request id's stem, and it is set as the current request id for
  the log lines of the request (`request_ids`).
- Every request handled here gets a `RequestRecord` (docs/observability.md §2): opened on
  arrival, filled by the request's nursery once per engine batch, and handed to the metrics and
  the request log when the request ends, however it ends.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Final, TypeVar

import trio

from smg_trio.core.finalize import finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.prepare import PromptModel, prepare_chat, prepare_completion, prepare_generate
from smg_trio.core.tokenize import detokenize_body, tokenize_body
from smg_trio.errors import ClientError, GatewayError, RequestTimeout
from smg_trio.model import ModelDir
from smg_trio.observability.metrics import GatewayMetrics
from smg_trio.observability.request_log import log_request
from smg_trio.observability.request_record import (
    CLIENT_GONE,
    DEADLINE,
    DRAIN,
    RequestRecord,
)
from smg_trio.observability.trace_context import outgoing_trace_headers
from smg_trio.request import ClientSink, run_request
from smg_trio.request_ids import current_request_id, new_request_id
from smg_trio.routing.workers import Worker, WorkerPool
from smg_trio.wire.openai_decode import (
    decode_chat_request,
    decode_completion_request,
    decode_generate_request,
)
from smg_trio.wire.openai_responses import JSON_ENCODER, ModelCard, ModelList, ModelPermission
from smg_trio.wire.openai_tokenize import decode_detokenize_request, decode_tokenize_request

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing is on (docs/observability.md §4)
    from smg_trio.observability.tracing import RequestTracer

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

GENERATE_PATHS: Final = ("/v1/chat/completions", "/v1/completions", "/generate")
TOKENIZE_PATH: Final = "/v1/tokenize"
DETOKENIZE_PATH: Final = "/v1/detokenize"
# Every POST path `Gateway.handle` serves (over HTTP and over the WebSocket protocol).
HANDLED_PATHS: Final = (*GENERATE_PATHS, TOKENIZE_PATH, DETOKENIZE_PATH)
# The endpoint label of any other path (a WebSocket request may name anything).
OTHER_ENDPOINT: Final = "other"
# Prompts longer than this are templated and tokenized on a worker thread, so a huge prompt
# cannot stall every other stream on the event loop; short ones are cheaper inline.
INLINE_PREPARE_MAX_BYTES: Final = 16 * 1024
# How long a request that ran out of time may still spend sending its timeout error.
TIMEOUT_ERROR_GRACE_S: Final = 1.0


class ModelNotFound(ClientError):
    """A `model` that is none of the served names: vLLM's 404 (message, type and param)."""

    def __init__(self, model: str) -> None:
        super().__init__(
            f"The model `{model}` does not exist.",
            status=404,
            code="model_not_found",
            param="model",
        )

    @property
    def error_type(self) -> str:
        return "NotFoundError"


class Gateway:
    def __init__(
        self,
        model: ModelDir,
        pool: WorkerPool,
        *,
        request_timeout_s: float,
        served_model_names: tuple[str, ...] = (),
        metrics: GatewayMetrics | None = None,
        log_requests: bool = False,
        tracer: RequestTracer | None = None,
    ) -> None:
        self.model = model
        self.prompt_model: PromptModel = model.prompt_model()
        self.pool = pool
        self.request_timeout_s = request_timeout_s
        self.served_model_names = served_model_names or (model.served_name,)
        self._created = int(time.time())
        self.metrics = metrics or GatewayMetrics(pool)
        # Set by `serve` once shutdown began: a request cancelled from then on was drained.
        self.draining = False
        self.log_requests = log_requests  # --log-requests: request bodies and texts in the log
        self.tracer = tracer  # --otlp-endpoint; None: tracing off, nothing traced

    @property
    def ready(self) -> bool:
        return self.pool.ready

    def models_body(self) -> bytes:
        """/v1/models: one vLLM-shaped card per served name, all for the one model folder."""
        cards = tuple(
            ModelCard(
                id=name,
                created=self._created,
                root=str(self.model.path),
                max_model_len=self.prompt_model.context_length,
                permission=(
                    ModelPermission(id=f"modelperm-{new_request_id()}", created=self._created),
                ),
            )
            for name in self.served_model_names
        )
        return JSON_ENCODER.encode(ModelList(data=cards))

    def check_model(self, model: str | None) -> None:
        """A request may name any served model, or none (vLLM takes the first then)."""
        if model is not None and model not in self.served_model_names:
            raise ModelNotFound(model)

    def pick_worker(self) -> Worker:
        """The worker for one request, as the pool's policy chooses; BackendUnavailable if none."""
        return self.pool.pick()

    async def handle(
        self,
        path: str,
        body: bytes,
        sink: ClientSink,
        *,
        request_id: str | None = None,
        transport: str = "http1",
        client: str = "-",
        trace_headers: Mapping[str, str] | None = None,
    ) -> None:
        """Serve one request to `sink`, under `request_id` (a fresh one when None).

        A request that fails before it reaches a backend (a bad body, no ready worker) raises
        GatewayError, nothing having been sent; every later failure, the deadline included,
        ends the response through `sink.fail`. `transport` (http1, h2, ws) and `client` (the
        peer's address) label its metrics and its log line; `trace_headers` (the client's
        `traceparent`, `tracestate`) parent its trace when tracing is on.
        """
        request_id = request_id or new_request_id()
        token = current_request_id.set(request_id)
        endpoint = path if path in HANDLED_PATHS else OTHER_ENDPOINT
        record = RequestRecord(
            request_id, endpoint, transport, client, keeps_text=self.log_requests
        )
        self.metrics.request_started(record)
        logger.debug("%s: started", path)
        tracer = self.tracer
        if tracer is not None:
            traced = tracer.start(trace_headers or {}, record)
            trace_token = outgoing_trace_headers.set(traced.outgoing)
        try:
            await self._handle(path, body, sink, record)
        except BaseException as exc:
            self._record_exit(record, exc)
            raise
        finally:
            logger.debug("%s: finished", path)
            ended = time.perf_counter()
            self.metrics.request_finished(record, ended)
            log_request(record, ended, with_text=self._logged_text(body, record))
            if tracer is not None:
                tracer.finish(traced, record, ended)
                outgoing_trace_headers.reset(trace_token)
            current_request_id.reset(token)

    async def _handle(
        self, path: str, body: bytes, sink: ClientSink, record: RequestRecord
    ) -> None:
        if path in (TOKENIZE_PATH, DETOKENIZE_PATH):
            await sink.send_body(
                await self._off_loop_if_large(partial(self._tokenize_now, path, body), body)
            )
            return
        deadline = trio.current_time() + self.request_timeout_s
        try:
            with trio.fail_at(deadline):
                plan = await self._off_loop_if_large(
                    partial(self._prepare_now, path, body, record.request_id), body
                )
                worker = self.pick_worker()
                record.worker_picked(worker.name, worker.target.runtime.value)
                finalized = finalize(plan, worker.target, self.prompt_model.tokenizer)
                await run_request(
                    plan,
                    finalized,
                    worker.backend,
                    self.prompt_model.tokenizer,
                    sink,
                    created=int(time.time()),
                    record=record,
                )
        except trio.TooSlowError:
            error = RequestTimeout(
                f"the request did not finish within {self.request_timeout_s:g} s"
            )
            record.failed(error)
            record.aborted(DEADLINE)
            # Past the deadline: telling the client gets a short, shielded grace of its own.
            with trio.move_on_after(TIMEOUT_ERROR_GRACE_S, shield=True):
                await sink.fail(error)

    def _record_exit(self, record: RequestRecord, exc: BaseException) -> None:
        """What an exception leaving `handle` says about the request, on its record."""
        if isinstance(exc, GatewayError):
            record.failed(exc)
        elif _is_cancellation(exc):
            # After the whole answer was handed to the transport, a cancel (the client closing
            # as the last bytes went) ends nothing: the request was served.
            if record.abort_cause is None and not record.answered:
                record.aborted(DRAIN if self.draining else CLIENT_GONE)
        else:
            record.failed(GatewayError("internal error"))

    def _logged_text(self, body: bytes, record: RequestRecord) -> dict[str, object] | None:
        if not self.log_requests:
            return None
        texts = list(record.texts) if record.texts is not None else []
        return {"request_body": body.decode("utf-8", "replace"), "completion_texts": texts}

    @staticmethod
    async def _off_loop_if_large(work: Callable[[], _T], body: bytes) -> _T:
        if len(body) <= INLINE_PREPARE_MAX_BYTES:
            return work()
        return await trio.to_thread.run_sync(work)

    def _prepare_now(self, path: str, body: bytes, request_id: str) -> GeneratePlan:
        model = self.prompt_model
        if path == "/v1/chat/completions":
            chat = decode_chat_request(body)
            self.check_model(chat.model)
            return prepare_chat(chat, model, request_id=request_id, now=dt.datetime.now(dt.UTC))
        if path == "/v1/completions":
            completion = decode_completion_request(body)
            self.check_model(completion.model)
            return prepare_completion(completion, model, request_id=request_id)
        if path == "/generate":
            generate = decode_generate_request(body)
            self.check_model(generate.model)
            return prepare_generate(generate, model, request_id=generate.rid or request_id)
        raise ClientError(f"unknown path {path!r}", status=404, code="not_found", param="path")

    def _tokenize_now(self, path: str, body: bytes) -> bytes:
        if path == TOKENIZE_PATH:
            tokenize = decode_tokenize_request(body)
            self.check_model(tokenize.model)
            return tokenize_body(
                tokenize, self.prompt_model, self.model.tokenizer, now=dt.datetime.now(dt.UTC)
            )
        detokenize = decode_detokenize_request(body)
        self.check_model(detokenize.model)
        return detokenize_body(detokenize, self.prompt_model)


def _is_cancellation(exc: BaseException) -> bool:
    """`trio.Cancelled`, alone or as the only kind in a group (a nursery's strict groups)."""
    if isinstance(exc, BaseExceptionGroup):
        _, others = exc.split(trio.Cancelled)
        return others is None
    return isinstance(exc, trio.Cancelled)
