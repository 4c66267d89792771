"""I/O. One request's record: what it was, when its tokens came, and how it ended.

`Gateway.handle` opens a `RequestRecord` when a request arrives; `request/nursery.py` updates it once
per engine batch (never per token); at the end the gateway hands it to the metrics and to the
request log (docs/observability.md §2). It reads the monotonic clock, hence I/O.

Inter-token latency is kept per engine batch, as (gap since the previous batch / tokens in this
batch): exact when every batch carries one token (the streaming case), and an even split of the
gap otherwise, so a burst of k tokens after a long wait counts as one sample of gap/k. One
sample per batch keeps the per-token cost at zero (docs/observability.md §2).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final

from smg_trio.errors import GatewayError
from smg_trio.neutral.events import ChoiceFinished, EngineEvent, TokenDelta
from smg_trio.wire.openai_responses import Usage

NO_WORKER: Final = "none"
# Abort causes (docs/observability.md §1): why a request ended before its engine finished.
CLIENT_GONE: Final = "client_gone"
ROUTER_STOP: Final = "router_stop"
DEADLINE: Final = "deadline"
DRAIN: Final = "drain"
# nginx's "client closed request": the status of a request whose client left first.
CLIENT_CLOSED_STATUS: Final = 499


class RequestRecord:
    """One request's figures, filled in as it goes (see the module doc)."""

    __slots__ = (
        "abort_cause",
        "answered",
        "arrived",
        "batches",
        "client",
        "completion_tokens",
        "endpoint",
        "engine_finishes",
        "error_code",
        "finish_reasons",
        "first_token",
        "generated_tokens",
        "inter_token_gaps",
        "keeps_text",
        "last_token",
        "migrated_at",
        "migration_refused",
        "migrations",
        "model",
        "picked",
        "prompt_tokens",
        "request_id",
        "resume_s",
        "runtime",
        "sent",
        "status",
        "texts",
        "transport",
        "worker",
    )

    def __init__(
        self,
        request_id: str,
        endpoint: str,
        transport: str,
        client: str,
        *,
        keeps_text: bool = False,
    ) -> None:
        self.request_id = request_id
        self.endpoint = endpoint
        self.transport = transport
        self.client = client
        self.arrived = time.perf_counter()
        self.worker = NO_WORKER
        self.runtime = NO_WORKER
        self.model = ""  # the key of the served model it asked for, once picked (fleet.md §4)
        self.picked: float | None = None  # a worker was chosen (the plan is ready)
        self.sent: float | None = None  # the engine requests went out
        self.first_token: float | None = None
        self.last_token: float | None = None
        self.batches = 0
        self.engine_finishes = 0
        self.inter_token_gaps: list[float] = []  # one per batch after the first: gap / tokens
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.generated_tokens = 0  # every token the engines sent, an unfinished answer's too
        self.finish_reasons: tuple[str, ...] = ()
        self.status = 200
        # The failure's code only, never the exception: an exception's traceback holds the
        # frames of the request (its body, its prompt), and this record is one of their locals
        # — a cycle that kept 8 MB bodies alive until the collector ran (docs/limits.md §2).
        self.error_code: str | None = None
        self.abort_cause: str | None = None
        self.answered = False  # the whole answer was built and is being handed to the transport
        self.keeps_text = keeps_text  # --log-requests: the completion texts are kept for the log
        self.texts: tuple[str, ...] | None = None
        # Mid-stream migrations (docs/resilience.md §9): the failures' codes, and for each the
        # time from the failure to the new worker's first token.
        # (Tuples: the empty one costs a request nothing.)
        self.migrations: tuple[str, ...] = ()
        self.resume_s: tuple[float, ...] = ()
        self.migrated_at: float | None = None  # a migration waits for its first token
        self.migration_refused: str | None = None

    def worker_picked(self, worker: str, runtime: str) -> None:
        self.worker, self.runtime = worker, runtime
        self.picked = time.perf_counter()

    def engine_sent(self) -> None:
        self.sent = time.perf_counter()

    def on_batch(self, batch: Sequence[EngineEvent]) -> None:
        """One engine batch arrived: its token count and finishes (once per batch)."""
        tokens = 0
        for event in batch:
            if type(event) is TokenDelta:
                tokens += len(event.token_ids)
            elif type(event) is ChoiceFinished:
                self.engine_finishes += 1
        if tokens:
            self.on_tokens(tokens)

    def on_tokens(self, tokens: int) -> None:
        """`on_batch` of a batch that is one delta of `tokens` (> 0) tokens (the fast lane)."""
        self.generated_tokens += tokens
        now = time.perf_counter()
        if self.migrated_at is not None:
            self.resume_s += (now - self.migrated_at,)
            self.migrated_at = None
        if self.last_token is None:
            self.first_token = now
        else:
            self.inter_token_gaps.append((now - self.last_token) / tokens)
        self.last_token = now
        self.batches += 1

    def assembled(
        self, usage: Usage, finish_reasons: tuple[str, ...], texts: tuple[str, ...] | None
    ) -> None:
        """What the response reported (or would have): token counts, finish reasons, and with
        `keeps_text` the choices' texts."""
        self.prompt_tokens = usage.prompt_tokens
        self.completion_tokens = usage.completion_tokens
        self.finish_reasons = finish_reasons
        self.texts = texts

    @property
    def output_tokens(self) -> int:
        """What the tenant gate charges as output (docs/fleet.md §2): the usage's completion
        tokens, or the tokens the engines sent when the request ended before its usage."""
        return max(self.completion_tokens, self.generated_tokens)

    def migrating(self, error: GatewayError, worker: str, runtime: str) -> None:
        """The request's worker failed with `error`; it goes on on `worker`."""
        self.migrations += (error.code,)
        self.migrated_at = time.perf_counter()
        self.worker, self.runtime = worker, runtime

    def failed(self, error: GatewayError) -> None:
        self.error_code = error.code
        self.status = error.status

    def retrying(self) -> None:
        """A failure held before the first byte goes to another worker (docs/routing.md §3):
        it is no longer this request's outcome; the last attempt's is."""
        self.error_code = None
        self.status = 200

    def aborted(self, cause: str) -> None:
        self.abort_cause = cause
        if cause in (CLIENT_GONE, DRAIN):
            self.status = CLIENT_CLOSED_STATUS

    def seconds(self, start: float | None, end: float | None) -> float | None:
        return None if start is None or end is None else end - start
