"""I/O. One Generate call of the gRPC backend as trio sees it: its task on the asyncio loop, how
its parsed responses become engine events, and what its task's end means. Which stream and
choice it feeds, and how its choice ends, is the backend's `InFlightTable` (in_flight.py).

Runs in trio only (the hand-off's deliver callback), so every method is synchronous and cheap.
Completion tokens are counted here from the chunks: the engines disagree on what the complete
message counts and repeats (cumulative on SGLang/TokenSpeed/TRT-LLM/MLX, the last delta on
vLLM; grpc_responses.py), so the complete message contributes only tokens no chunk carried.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import outcome
import trio

from smg_trio.backends.asyncio_bridge import BridgeTask
from smg_trio.backends.in_flight import InFlight, InFlightTable
from smg_trio.errors import BackendError, BackendUnavailable, EngineRejected
from smg_trio.neutral.events import TokenLogprob
from smg_trio.wire.grpc_responses import GrpcChunk, GrpcComplete

logger = logging.getLogger(__name__)


@dataclass(eq=False, kw_only=True)
class GrpcCall(InFlight[str]):
    """One engine request (its engine is the service address) and its Generate task."""

    cumulative_complete: bool
    task: BridgeTask | None = None
    task_done: trio.Event = field(default_factory=trio.Event)
    """Its asyncio task has ended (its outcome arrived through the hand-off)."""


def apply_response(
    in_flight: InFlightTable[str, GrpcCall], call: GrpcCall, event: GrpcChunk | GrpcComplete
) -> None:
    """Deliver the tokens of `event`; a complete message also ends the call's choice."""
    if event.prompt_tokens:
        call.prompt_tokens = event.prompt_tokens
    if isinstance(event, GrpcChunk):
        if event.token_ids:
            call.deliver_tokens(event.token_ids, _positions(event.token_ids, event.logprobs))
        return
    if call.cumulative_complete:
        tail = event.token_ids[call.completion_tokens :]
    else:  # vLLM's complete repeats its last chunk; it carries news only without chunks
        tail = () if call.completion_tokens else event.token_ids
    if tail:
        call.deliver_tokens(tail, None)
    call.cached_tokens = event.cached_tokens
    failure = f"the engine finished with {event.finish_reason!r}"
    in_flight.end_choice(call, event.finish_reason, event.stop_reason, failure=failure)


def _positions(
    token_ids: tuple[int, ...], logprobs: tuple[TokenLogprob, ...] | None
) -> tuple[TokenLogprob, ...] | None:
    """The logprobs of a chunk when the engine sent one per token, else None."""
    if logprobs is None or len(logprobs) != len(token_ids):
        return None
    return logprobs


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
