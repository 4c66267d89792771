"""I/O. The gateway's request entry point, shared by every front end (HTTP and WebSocket).

`Gateway.handle(path, body, sink)` decodes and validates the body, prepares and finalizes the
request for the worker its `routing.workers.WorkerPool` picks, and runs the per-request
nursery under the request deadline. A request that fails before it reaches a backend raises a
GatewayError for the front end to hand to its sink; anything later reaches `sink.fail` directly.
Either way the sink's state decides what the error becomes (an HTTP status or a final event).
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Final

import trio

from smg_trio.core.finalize import finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.prepare import PromptModel, prepare_chat, prepare_completion, prepare_generate
from smg_trio.errors import ClientError, RequestTimeout
from smg_trio.model import ModelDir
from smg_trio.request import ClientSink, run_request
from smg_trio.routing.workers import Worker, WorkerPool
from smg_trio.wire.openai_decode import (
    decode_chat_request,
    decode_completion_request,
    decode_generate_request,
)
from smg_trio.wire.openai_responses import JSON_ENCODER, ModelCard, ModelList

GENERATE_PATHS: Final = ("/v1/chat/completions", "/v1/completions", "/generate")
# Prompts longer than this are templated and tokenized on a worker thread, so a huge prompt
# cannot stall every other stream on the event loop; short ones are cheaper inline.
INLINE_PREPARE_MAX_BYTES: Final = 16 * 1024
# How long a request that ran out of time may still spend sending its timeout error.
TIMEOUT_ERROR_GRACE_S: Final = 1.0


class Gateway:
    def __init__(self, model: ModelDir, pool: WorkerPool, *, request_timeout_s: float) -> None:
        self.model = model
        self.prompt_model: PromptModel = model.prompt_model()
        self.pool = pool
        self.request_timeout_s = request_timeout_s
        self._created = int(time.time())

    @property
    def ready(self) -> bool:
        return self.pool.ready

    def models_body(self) -> bytes:
        card = ModelCard(id=self.prompt_model.name, created=self._created, owned_by="smg-trio")
        return JSON_ENCODER.encode(ModelList(data=(card,)))

    def pick_worker(self) -> Worker:
        """The worker for one request, as the pool's policy chooses; BackendUnavailable if none."""
        return self.pool.pick()

    async def handle(self, path: str, body: bytes, sink: ClientSink) -> None:
        """Serve one generation request to `sink`.

        A request that fails before it reaches a backend (a bad body, no ready worker) raises
        GatewayError, nothing having been sent; every later failure, the deadline included,
        ends the response through `sink.fail`.
        """
        deadline = trio.current_time() + self.request_timeout_s
        try:
            with trio.fail_at(deadline):
                plan = await self._prepare(path, body)
                worker = self.pick_worker()
                finalized = finalize(plan, worker.target, self.prompt_model.tokenizer)
                await run_request(
                    plan,
                    finalized,
                    worker.backend,
                    self.prompt_model.tokenizer,
                    sink,
                    created=int(time.time()),
                )
        except trio.TooSlowError:
            error = RequestTimeout(
                f"the request did not finish within {self.request_timeout_s:g} s"
            )
            # Past the deadline: telling the client gets a short, shielded grace of its own.
            with trio.move_on_after(TIMEOUT_ERROR_GRACE_S, shield=True):
                await sink.fail(error)

    async def _prepare(self, path: str, body: bytes) -> GeneratePlan:
        if len(body) <= INLINE_PREPARE_MAX_BYTES:
            return self._prepare_now(path, body)
        return await trio.to_thread.run_sync(self._prepare_now, path, body)

    def _prepare_now(self, path: str, body: bytes) -> GeneratePlan:
        request_id = uuid.uuid4().hex
        model = self.prompt_model
        if path == "/v1/chat/completions":
            return prepare_chat(
                decode_chat_request(body), model, request_id=request_id, now=dt.datetime.now(dt.UTC)
            )
        if path == "/v1/completions":
            return prepare_completion(decode_completion_request(body), model, request_id=request_id)
        if path == "/generate":
            generate = decode_generate_request(body)
            return prepare_generate(generate, model, request_id=generate.rid or request_id)
        raise ClientError(f"unknown path {path!r}", status=404, code="not_found", param="path")
