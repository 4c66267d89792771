"""Pure. The two ZMQ engine dialects (vLLM EngineCore, TokenSpeed) seen through one interface:
an `EngineRequest` in, the ADD payload out; an output message in, per-request steps out.

`zmq_backend` owns sockets, tasks and routing; this module owns only shapes. It hands a
finalized `EngineRequest` and the engine's own facts to the dialect's wire builder, and flattens
both output layouts (vLLM's list of per-request structs with integer finish reasons and logprob
arrays; TokenSpeed's column batch with string reasons and cumulative counts) into
`RequestStep`s; a vLLM output that is plain token ids stays the decoded struct (`PlainTokens`),
so the common streamed token makes no object of ours.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import msgspec

from smg_trio.backends.base import NO_PREFIX_CACHE_DELTA, EngineLoad, PrefixCacheCounts
from smg_trio.errors import BackendProtocolError, UnsupportedRuntime
from smg_trio.neutral.events import TokenLogprob
from smg_trio.neutral.pooling import PoolingRequest
from smg_trio.neutral.runtime import Runtime
from smg_trio.neutral.sampling import EngineRequest
from smg_trio.wire import tokenspeed_zmq, vllm_pooling, vllm_zmq, vllm_zmq_outputs
from smg_trio.wire.vllm_mm_features import checked_features, encode_features
from smg_trio.wire.zmq_transport import RequestType


class Registration(msgspec.Struct, frozen=True):
    """What we keep of an engine's registration map (either dialect)."""

    max_model_len: int
    version: str
    data_parallel_rank: int


class RequestStep(msgspec.Struct, frozen=True, kw_only=True):
    """One engine request's share of one output message."""

    request_id: str
    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...] | None = None
    prompt_logprobs: tuple[TokenLogprob, ...] | None = None  # positions 1.. of the prompt
    finish_reason: str | None = None  # None while running; "stop" | "length" | "abort" | "error"
    stop_reason: int | str | None = None
    error: str | None = None  # the engine's words for an "error" finish
    prompt_tokens: int | None = None  # when the engine reports it
    completion_tokens: int | None = None  # cumulative, when the engine reports it
    cached_tokens: int | None = None
    cache_creation_tokens: int | None = None  # vLLM: prompt tokens it wrote to its prefix cache
    cache_miss: tuple[str, ...] = ()  # vLLM: image keys sent as `data: nil` it did not hold
    pooled: tuple[tuple[float, ...], tuple[int, ...]] | None = None  # a pooling finish's tensor
    weight_version: str | None = None  # vLLM: the engine's weights at this step (finishes only)


class PlainTokens(Protocol):
    """One engine request's share of one output message that is token ids and nothing else (no
    logprobs, prompt logprobs, prompt counts or finish): vLLM's own decoded output, kept as it
    is instead of a `RequestStep` (the fast lane of docs/performance.md §2)."""

    @property
    def request_id(self) -> str: ...

    @property
    def new_token_ids(self) -> tuple[int, ...]: ...


class UtilityReply(msgspec.Struct, frozen=True):
    call_id: int
    failure: str | None
    value: Any


class OutputMessage(msgspec.Struct, frozen=True):
    engine_index: int
    steps: Sequence[RequestStep | PlainTokens]  # in the engine's order
    utility: UtilityReply | None = None
    load: EngineLoad | None = None  # what the message reported of the engine's load, if any
    prefix_cache: PrefixCacheCounts | None = None  # its prefix-cache counts since its last report


def decode_registration(runtime: Runtime, payload: bytes) -> Registration:
    match runtime:
        case Runtime.VLLM:
            vllm = vllm_zmq.decode_ready_response(payload)
            return Registration(vllm.max_model_len, vllm.vllm_version, vllm.data_parallel_rank)
        case Runtime.TOKENSPEED:
            ts = tokenspeed_zmq.decode_ready_response(payload)
            return Registration(ts.max_model_len, ts.vllm_version, ts.data_parallel_rank)
        case _:
            raise UnsupportedRuntime(f"no ZMQ dialect for runtime {runtime.value!r}")


def encode_add(
    runtime: Runtime,
    request: EngineRequest,
    *,
    engine_request_id: str,
    max_model_len: int,
    vocab_size: int | None,
    arrival_time: float,
    client_index: int = 0,
    cached_media: frozenset[str] = frozenset(),
) -> list[bytes]:
    """`[type byte, payload, *tensor frames]` of one ADD; raises ClientError for values the
    engine would refuse. `client_index`: the process's output socket in INIT (0 with one;
    docs/processes.md §3). `cached_media`: image identifiers the engine holds (sent without
    data)."""
    match runtime:
        case Runtime.VLLM:
            features, aux = None, list[bytes]()
            if request.media:
                checked_features(request.media, len(request.prompt_ids))
                features, aux = encode_features(request.media, cached=cached_media)
            vllm_request = vllm_zmq.build_request(
                request,
                engine_request_id=engine_request_id,
                max_model_len=max_model_len,
                arrival_time=arrival_time,
                vocab_size=vocab_size,
                client_index=client_index,
                external_req_id=request.request_id,
                mm_features=features,
            )
            return [RequestType.ADD.frame, vllm_zmq.encode_request(vllm_request), *aux]
        case Runtime.TOKENSPEED:
            tokenspeed_request = tokenspeed_zmq.build_request(
                request,
                engine_request_id=engine_request_id,
                max_model_len=max_model_len,
                vocab_size=vocab_size,
                stream=True,
            )
            return [RequestType.ADD.frame, tokenspeed_zmq.encode_request(tokenspeed_request)]
        case _:
            raise UnsupportedRuntime(f"no ZMQ dialect for runtime {runtime.value!r}")


def encode_pooling_add(
    runtime: Runtime,
    request: PoolingRequest,
    *,
    engine_request_id: str,
    max_model_len: int,
    vocab_size: int | None,
    arrival_time: float,
    client_index: int = 0,
) -> list[bytes]:
    """`[type byte, payload]` of one pooling ADD (docs/pooling.md §2); vLLM only (TokenSpeed
    has no pooling requests)."""
    if runtime is not Runtime.VLLM:
        raise UnsupportedRuntime(f"{runtime.value} over ZMQ has no pooling requests")
    vllm_request = vllm_pooling.build_pooling_request(
        request,
        engine_request_id=engine_request_id,
        max_model_len=max_model_len,
        arrival_time=arrival_time,
        vocab_size=vocab_size,
        client_index=client_index,
    )
    return [RequestType.ADD.frame, vllm_zmq.encode_request(vllm_request)]


def decode_output(runtime: Runtime, frames: Sequence[bytes]) -> OutputMessage:
    """Flatten one output message (not the dead sentinel); BackendProtocolError if malformed."""
    match runtime:
        case Runtime.VLLM:
            return _vllm_message(vllm_zmq_outputs.decode_outputs(frames), frames)
        case Runtime.TOKENSPEED:
            try:
                return _tokenspeed_message(tokenspeed_zmq.decode_outputs(frames))
            except BackendProtocolError:
                reply = _utility_reply(frames)
                if reply is None:
                    raise
                return reply
        case _:
            raise UnsupportedRuntime(f"no ZMQ dialect for runtime {runtime.value!r}")


def _utility_reply(frames: Sequence[bytes]) -> OutputMessage | None:
    """A vLLM-shaped utility reply on a TokenSpeed socket, or None.

    Real TokenSpeed has no UTILITY request; our reference TokenSpeed engine answers one in
    vLLM's shape as a test-only extension, and only a `call_utility` we made can provoke it.
    """
    try:
        message = vllm_zmq_outputs.decode_outputs(frames)
    except BackendProtocolError:
        return None
    if message.utility_output is None or message.outputs:
        return None
    return _vllm_message(message, frames)


def _vllm_message(
    message: vllm_zmq_outputs.EngineCoreOutputs, frames: Sequence[bytes]
) -> OutputMessage:
    outputs = message.outputs
    steps: Sequence[RequestStep | PlainTokens] = outputs  # plain token ids: as decoded
    for position, output in enumerate(outputs):  # `_plain`, inline: once per token
        if (
            output.finish_reason is not None
            or output.new_logprobs is not None
            or output.new_prompt_logprobs_tensors is not None
            or output.prefill_stats is not None
        ):  # this one and those after it through `_vllm_step`, in order
            steps = [
                *outputs[:position],
                *(_vllm_step(each, frames, message.weight_version) for each in outputs[position:]),
            ]
            break
    utility = None
    if message.utility_output is not None:
        reply = message.utility_output
        value = None if reply.result is None else reply.result[1]
        utility = UtilityReply(reply.call_id, reply.failure_message, value)
    stats = message.scheduler_stats  # only when the engine logs stats (docs/wire.md §A.7.4)
    if stats is None:
        return OutputMessage(message.engine_index, steps, utility)
    load = EngineLoad(stats.num_running_reqs, stats.num_waiting_reqs, stats.kv_cache_usage)
    # Deltas: most steps (decode only) admit nothing, and share one empty report.
    cache = stats.prefix_cache_stats
    counts = None
    if cache is not None:
        counts = NO_PREFIX_CACHE_DELTA
        if (
            cache.requests
            or cache.queries
            or cache.hits
            or cache.preempted_requests
            or cache.preempted_queries
            or cache.preempted_hits
            or cache.reset
        ):
            counts = _prefix_cache_counts(cache)
    return OutputMessage(message.engine_index, steps, utility, load, counts)


def _plain(output: vllm_zmq_outputs.EngineCoreOutput) -> bool:
    """Token ids and nothing the gateway reads besides (`PlainTokens`)."""
    return (
        output.finish_reason is None
        and output.new_logprobs is None
        and output.new_prompt_logprobs_tensors is None
        and output.prefill_stats is None
        and output.pooling_output is None
    )


def _vllm_step(
    output: vllm_zmq_outputs.EngineCoreOutput,
    frames: Sequence[bytes],
    weight_version: str | None = None,
) -> RequestStep | PlainTokens:
    """One output as a `RequestStep`, or as it is when it is plain token ids."""
    if _plain(output):
        return output
    logprobs = None
    if output.new_logprobs is not None:
        logprobs = vllm_zmq_outputs.decode_logprobs(output.new_logprobs, frames)
        if len(logprobs) != len(output.new_token_ids):
            raise BackendProtocolError(
                f"{len(logprobs)} logprob positions for {len(output.new_token_ids)} tokens"
            )
    prompt_logprobs = None
    if output.new_prompt_logprobs_tensors is not None:
        prompt_logprobs = vllm_zmq_outputs.decode_prompt_logprobs(
            output.new_prompt_logprobs_tensors, frames
        )
    error = None
    if output.finish_reason == vllm_zmq_outputs.FinishReason.ERROR:
        error = "the engine failed the request"
        if output.error is not None:
            error = output.error.message or output.error.code or error
    prefill = output.prefill_stats
    pooled = None
    if output.pooling_output is not None:  # at the finish, so never on the plain lane
        pooled = vllm_pooling.pooled_tensor(output.pooling_output, frames)
    return RequestStep(
        request_id=output.request_id,
        token_ids=output.new_token_ids,
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
        finish_reason=vllm_zmq_outputs.finish_reason_text(output.finish_reason),
        stop_reason=output.stop_reason,
        error=error,
        prompt_tokens=None if prefill is None else prefill.num_prompt_tokens,
        cached_tokens=None if prefill is None else prefill.num_cached_tokens,
        cache_creation_tokens=None if prefill is None else prefill.num_cache_creation_tokens,
        cache_miss=output.mm_cache_miss_hashes or (),
        pooled=pooled,
        weight_version=None if output.finish_reason is None else weight_version,
    )


def _prefix_cache_counts(cache: vllm_zmq_outputs.PrefixCacheStats) -> PrefixCacheCounts:
    return PrefixCacheCounts(
        cache.requests,
        cache.queries,
        cache.hits,
        cache.preempted_requests,
        cache.preempted_queries,
        cache.preempted_hits,
        1 if cache.reset else 0,
    )


def _tokenspeed_message(batch: tokenspeed_zmq.BatchTokenIDOutSlim) -> OutputMessage:
    steps = []
    for row in tokenspeed_zmq.split_batch(batch):
        logprobs = None
        if row.logprobs:
            if len(row.logprobs) != len(row.output_ids):
                raise BackendProtocolError(
                    f"{len(row.logprobs)} logprobs for {len(row.output_ids)} tokens"
                )
            logprobs = tuple(
                TokenLogprob(token_id=token_id, logprob=value)
                for token_id, value in zip(row.output_ids, row.logprobs, strict=True)
            )
        steps.append(
            RequestStep(
                request_id=row.rid,
                token_ids=row.output_ids,
                logprobs=logprobs,
                finish_reason=tokenspeed_zmq.finish_reason_text(row.finished_reason),
                error="the engine failed the request" if row.finished_reason == "error" else None,
                prompt_tokens=row.prompt_tokens,
                completion_tokens=row.completion_tokens,
                cached_tokens=row.cached_tokens,
            )
        )
    # The 0.1.1 load tail; an engine without it leaves every field 0 (a real one has KV pages).
    load = None
    if batch.kv_total_pages > 0:
        usage = batch.kv_active_pages / batch.kv_total_pages
        load = EngineLoad(batch.num_running, batch.num_waiting, usage)
    return OutputMessage(batch.engine_index, tuple(steps), load=load)
