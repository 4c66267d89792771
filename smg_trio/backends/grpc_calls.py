"""I/O. One Generate call of the gRPC backend as trio sees it: which choice of which open stream
it feeds, how its parsed responses become engine events, and what its task's end means.

Runs in trio only (the hand-off's deliver callback), so every method is synchronous and cheap.
Completion tokens are counted here from the chunks: the engines disagree on what the complete
message counts and repeats (cumulative on SGLang/TokenSpeed/TRT-LLM/MLX, the last delta on
vLLM; grpc_responses.py), so the complete message contributes only tokens no chunk carried.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from typing import Final

import outcome
import trio

from smg_trio.backends.asyncio_bridge import BridgeTask
from smg_trio.backends.event_stream import EngineEventStream
from smg_trio.errors import BackendError, BackendUnavailable, EngineRejected
from smg_trio.neutral.events import ChoiceFinished, TokenDelta, TokenLogprob
from smg_trio.wire.grpc_responses import GrpcChunk, GrpcComplete

logger = logging.getLogger(__name__)

_CLIENT_FINISHES: Final = {"stop": "stop", "length": "length", "tool_calls": "stop"}


@dataclass(eq=False)
class GrpcCall:
    """One engine request (one choice of an open stream) and its Generate task on the loop."""

    engine_request_id: str
    choice_index: int
    stream: EngineEventStream
    prompt_tokens: int
    cumulative_complete: bool
    task: BridgeTask | None = None
    completion_tokens: int = 0
    live: bool = True
    """Neither finished, failed nor abandoned: leaving its stream must abort it."""
    task_done: trio.Event = field(default_factory=trio.Event)
    """Its asyncio task has ended (its outcome arrived through the hand-off)."""

    def advance(self, event: GrpcChunk | GrpcComplete) -> ChoiceFinished | EngineRejected | None:
        """Deliver the tokens of `event`; for a complete message, return how the choice ended
        (the caller delivers it and retires the call)."""
        if event.prompt_tokens:
            self.prompt_tokens = event.prompt_tokens
        if isinstance(event, GrpcChunk):
            if event.token_ids:
                self._deliver_tokens(event.token_ids, event.logprobs)
            return None
        if self.cumulative_complete:
            tail = event.token_ids[self.completion_tokens :]
        else:  # vLLM's complete repeats its last chunk; it carries news only without chunks
            tail = () if self.completion_tokens else event.token_ids
        if tail:
            self._deliver_tokens(tail, None)
        finish_reason = _CLIENT_FINISHES.get(event.finish_reason)
        if finish_reason is None:
            if event.finish_reason == "abort":
                return EngineRejected("the engine aborted the request", status=503)
            return EngineRejected(f"the engine finished with {event.finish_reason!r}")
        return ChoiceFinished(
            choice_index=self.choice_index,
            finish_reason=finish_reason,
            stop_reason=event.stop_reason,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cached_tokens=event.cached_tokens,
        )

    def _deliver_tokens(
        self, token_ids: tuple[int, ...], logprobs: tuple[TokenLogprob, ...] | None
    ) -> None:
        self.completion_tokens += len(token_ids)
        positions = logprobs if logprobs is not None and len(logprobs) == len(token_ids) else None
        self.stream.deliver(TokenDelta(self.choice_index, token_ids, positions))


def new_engine_request_id(request_id: str, taken: Iterable[Container[str]]) -> str:
    """The client's id plus a random suffix, in none of `taken` (as vLLM's frontend does), so
    a client id never collides with one in flight."""
    while True:
        candidate = f"{request_id}-{secrets.token_hex(4)}"
        if not any(candidate in ids for ids in taken):
            return candidate


def failure_of(call: GrpcCall, result: outcome.Outcome[None]) -> BackendError:
    """Why a call whose choice had not finished ended: its task's outcome as our error.

    The task raises only our errors (grpc_services.translated_errors); a normal return means
    the engine closed the stream without a complete message.
    """
    match result:
        case outcome.Value():
            return EngineRejected("the engine ended the stream without a complete message")
        case outcome.Error(error=BackendError() as error):
            return error
        case outcome.Error(error=asyncio.CancelledError()):
            return BackendUnavailable("the asyncio bridge shut down during the call")
        case outcome.Error(error=other):
            logger.error("gRPC call %s ended with %r", call.engine_request_id, other)
            return BackendUnavailable(f"the gRPC call ended unexpectedly: {other!r}")
        case _:  # pragma: no cover - Outcome is Value | Error
            raise AssertionError(result)
