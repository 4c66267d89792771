"""Pure. The engines' gRPC Generate stream messages as neutral events, and gRPC status → HTTP.

`parse_generate_response` takes one streamed `GenerateResponse` of any of the five engines
(docs/wire.md §C) and returns a `GrpcChunk` (new tokens of one output) or a `GrpcComplete` (that
output finished). What it does NOT smooth over, because it needs the request's context:

- With `stream=true` the tokens of an output are the concatenation of its chunks; the complete
  message's `token_ids` repeat them (cumulative on SGLang/TokenSpeed/TRT-LLM/MLX, the last
  delta on vLLM) and must not be emitted again. With `stream=false` only complete messages
  come, carrying every token.
- `completion_tokens` is the engine's number as sent: vLLM's servicer counts per chunk, and its
  streaming complete message counts only the last delta; the others count cumulatively.

Finish reasons are the engines' strings, except TRT-LLM's "stop_word", which is "stop".
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Final, TypeAlias, assert_never

import msgspec

from smg_trio.errors import BackendProtocolError
from smg_trio.neutral.events import TokenLogprob, TopLogprob
from smg_trio.wire._proto import mlx_engine_pb2 as mlx
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang
from smg_trio.wire._proto import tokenspeed_scheduler_pb2 as tokenspeed
from smg_trio.wire._proto import trtllm_service_pb2 as trtllm
from smg_trio.wire._proto import vllm_engine_pb2 as vllm

GenerateResponse: TypeAlias = (
    vllm.GenerateResponse
    | sglang.GenerateResponse
    | tokenspeed.GenerateResponse
    | mlx.GenerateResponse
    | trtllm.GenerateResponse
)
OutputLogProbs: TypeAlias = (
    vllm.OutputLogProbs | sglang.OutputLogProbs | tokenspeed.OutputLogProbs | mlx.OutputLogProbs
)


class GrpcChunk(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """New tokens of output `index` since its previous chunk (may be empty)."""

    index: int
    token_ids: tuple[int, ...]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    logprobs: tuple[TokenLogprob, ...] | None = None  # parallel to token_ids when sent


class GrpcComplete(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """Output `index` finished. `stop_reason` is the matched stop token id or stop string.

    `finish_reason` is "stop", "length", "abort", "error" or "tool_calls" (TokenSpeed).
    """

    index: int
    token_ids: tuple[int, ...]
    finish_reason: str
    stop_reason: int | str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


GrpcEvent: TypeAlias = GrpcChunk | GrpcComplete

_FINISH_REASON_ALIASES: Final = {"stop_word": "stop"}


def parse_generate_response(response: GenerateResponse) -> GrpcEvent:
    """The neutral event for one streamed message; a message with neither part is a 502."""
    match response:
        case trtllm.GenerateResponse():
            return _parse_trtllm(response)
        case (
            vllm.GenerateResponse()
            | sglang.GenerateResponse()
            | tokenspeed.GenerateResponse()
            | mlx.GenerateResponse()
        ):
            return _parse_common(response)
        case _:
            assert_never(response)


def _parse_common(
    response: vllm.GenerateResponse
    | sglang.GenerateResponse
    | tokenspeed.GenerateResponse
    | mlx.GenerateResponse,
) -> GrpcEvent:
    part = response.WhichOneof("response")
    if part == "chunk":
        chunk = response.chunk
        return GrpcChunk(
            index=chunk.index,
            token_ids=tuple(chunk.token_ids),
            prompt_tokens=chunk.prompt_tokens,
            completion_tokens=chunk.completion_tokens,
            cached_tokens=chunk.cached_tokens,
            logprobs=(
                _columns_logprobs(chunk.output_logprobs)
                if chunk.HasField("output_logprobs")
                else None
            ),
        )
    if part == "complete":
        complete = response.complete
        if isinstance(complete, mlx.GenerateComplete):
            stop_reason: int | str | None = (
                complete.matched_stop_token_id
                if complete.HasField("matched_stop_token_id")
                else None
            )
        else:
            stop_reason = _matched_stop(complete)
        return GrpcComplete(
            index=complete.index,
            token_ids=tuple(complete.output_ids),
            finish_reason=_finish_reason(complete.finish_reason),
            stop_reason=stop_reason,
            prompt_tokens=complete.prompt_tokens,
            completion_tokens=complete.completion_tokens,
            cached_tokens=complete.cached_tokens,
        )
    raise BackendProtocolError("engine sent a GenerateResponse with neither chunk nor complete")


def _parse_trtllm(response: trtllm.GenerateResponse) -> GrpcEvent:
    part = response.WhichOneof("response")
    if part == "chunk":
        chunk = response.chunk
        return GrpcChunk(
            index=chunk.sequence_index,
            token_ids=tuple(chunk.token_ids),
            prompt_tokens=chunk.prompt_tokens,
            completion_tokens=chunk.completion_tokens,
            cached_tokens=chunk.cached_tokens,
            logprobs=_rows_logprobs(chunk.logprobs) if chunk.logprobs else None,
        )
    if part == "complete":
        complete = response.complete
        return GrpcComplete(
            index=complete.sequence_index,
            token_ids=tuple(complete.output_token_ids),
            finish_reason=_finish_reason(complete.finish_reason),
            stop_reason=_matched_stop(complete),
            prompt_tokens=complete.prompt_tokens,
            completion_tokens=complete.completion_tokens,
            cached_tokens=complete.cached_tokens,
        )
    raise BackendProtocolError("engine sent a GenerateResponse with neither chunk nor complete")


def _matched_stop(
    complete: vllm.GenerateComplete
    | sglang.GenerateComplete
    | tokenspeed.GenerateComplete
    | trtllm.GenerateComplete,
) -> int | str | None:
    match complete.WhichOneof("matched_stop"):
        case "matched_token_id":
            return complete.matched_token_id
        case "matched_stop_str":
            return complete.matched_stop_str
        case _:
            return None


def _finish_reason(reason: str) -> str:
    if not reason:
        raise BackendProtocolError("engine finished an output without a finish reason")
    return _FINISH_REASON_ALIASES.get(reason, reason)


def _columns_logprobs(logprobs: OutputLogProbs) -> tuple[TokenLogprob, ...]:
    """OutputLogProbs keeps parallel columns; `top_logprobs` is empty unless top-k was asked."""
    ids, values, tops = logprobs.token_ids, logprobs.token_logprobs, logprobs.top_logprobs
    if len(ids) != len(values) or len(tops) not in (0, len(ids)):
        raise BackendProtocolError(
            f"engine sent logprob columns of different lengths: {len(ids)} token ids, "
            f"{len(values)} logprobs, {len(tops)} top-k lists"
        )
    positions: list[TokenLogprob] = []
    for i, (token_id, logprob) in enumerate(zip(ids, values, strict=True)):
        top: tuple[TopLogprob, ...] = ()
        if tops:
            if len(tops[i].token_ids) != len(tops[i].values):
                raise BackendProtocolError("engine sent a top-k list with unpaired values")
            top = tuple(
                TopLogprob(top_id, value)
                for top_id, value in zip(tops[i].token_ids, tops[i].values, strict=True)
            )
        positions.append(TokenLogprob(token_id=token_id, logprob=logprob, top=top))
    return tuple(positions)


def _rows_logprobs(rows: Sequence[trtllm.TokenLogprob]) -> tuple[TokenLogprob, ...]:
    return tuple(
        TokenLogprob(
            token_id=row.token_id,
            logprob=row.logprob,
            top=tuple(TopLogprob(top.token_id, top.logprob) for top in row.top_logprobs),
        )
        for row in rows
    )


# ---- gRPC status → HTTP status -------------------------------------------------------------


class GrpcStatus(enum.IntEnum):
    """The gRPC status codes (the protocol's numbers; grpclib's `Status` has the same)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


_HTTP_STATUS: Final = {
    GrpcStatus.INVALID_ARGUMENT: 400,
    GrpcStatus.FAILED_PRECONDITION: 400,
    GrpcStatus.OUT_OF_RANGE: 400,
    GrpcStatus.CANCELLED: 400,
    GrpcStatus.UNAUTHENTICATED: 401,
    GrpcStatus.PERMISSION_DENIED: 403,
    GrpcStatus.NOT_FOUND: 404,
    GrpcStatus.ALREADY_EXISTS: 409,
    GrpcStatus.ABORTED: 409,
    GrpcStatus.RESOURCE_EXHAUSTED: 429,
    GrpcStatus.UNIMPLEMENTED: 501,
    GrpcStatus.UNAVAILABLE: 503,
    GrpcStatus.DEADLINE_EXCEEDED: 504,
}


def http_status_for_grpc(status: int | enum.Enum) -> int:
    """The HTTP status for a gRPC status (docs/stops-and-finalize.md §1.4); anything else is 500.

    Takes a code number, our `GrpcStatus`, or grpclib's `Status` (a plain Enum of the codes).
    """
    code = status.value if isinstance(status, enum.Enum) else status
    try:
        known = GrpcStatus(code)
    except ValueError:
        return 500
    return _HTTP_STATUS.get(known, 500)
