"""Pure. TokenSpeed 0.1.1's msgpack data plane over the shared ZMQ transport (docs/wire.md §B): the
tagged `TokenizedGenerateReqInput` ADD with its 29-element sampling array, the column-batched
`BatchTokenIDOutSlim` outputs, and TokenSpeed's handshake and registration maps.

Tagged structs are arrays whose element 0 is the class name. We encode the full 0.1.1 layouts
(25-element request, 14-element batch); decoders check the tag, accept the required prefix and
ignore extra trailing elements. Sampling is sent normalized (`is_normalized=true`) so the engine
does not re-derive it. TokenSpeed stops at EOS by itself and never sees stop strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from smg_trio.errors import BackendProtocolError, ClientError
from smg_trio.neutral.sampling import ConstraintKind, EngineRequest, StructuredConstraint
from smg_trio.neutral.validation import checked_ids, checked_prompt, token_budget
from smg_trio.wire.msgpack_ints import checked_int
from smg_trio.wire.zmq_transport import decode_message

TOP_K_DISABLED: Final = 1 << 30  # TokenSpeed's "all tokens" sentinel
_GREEDY_BELOW: Final = 1e-6
FINISH_REASONS: Final = frozenset({"stop", "length", "abort", "error"})


class TokenSpeedSamplingParams(msgspec.Struct, array_like=True, frozen=True, kw_only=True):
    """TokenSpeed's SamplingParams: an untagged 29-element array, defaults as the engine's."""

    max_new_tokens: int | None = None
    stop: Any = None  # str | list[str]; never sent
    stop_token_ids: tuple[int, ...] | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    thinking_budget: int | None = None
    custom_params: dict[str, Any] | None = None
    stream_interval: int | None = None
    logit_bias: dict[str, float] | None = None  # string token-id keys
    seed: int | None = None  # None: the engine derives one from crc32(rid)
    logprobs: int | None = None
    n: int = 1
    stop_strs: Any = None  # str | list[str]; [] once normalized
    stop_str_max_len: int = 0
    is_normalized: bool = False


class TokenizedGenerateReqInput(
    msgspec.Struct,
    tag="TokenizedGenerateReqInput",
    tag_field="_tag",
    array_like=True,
    frozen=True,
    kw_only=True,
):
    """The ADD payload (0x00): tagged, positional. Only `sampling_params` is required."""

    rid: str | None = None
    http_worker_ipc: str | None = None
    input_text: str | None = None
    input_ids: tuple[int, ...] | None = None
    sampling_params: TokenSpeedSamplingParams
    return_logprob: bool = False
    logprob_start_len: int = -1  # -1: no prompt logprobs (the only value this wire accepts)
    top_logprobs_num: int = 0
    token_ids_logprob: tuple[int, ...] | None = None
    stream: bool = False
    input_embeds: Any = None
    session_params: Any = None
    custom_logit_processor: str | None = None
    return_hidden_states: bool = False
    created_time: float = 0.0
    bootstrap_host: str | None = None
    bootstrap_port: int | None = None
    bootstrap_room: int | None = None
    input_multi_ids: Any = None
    input_extra_infos: Any = None
    input_ids_unpadded: Any = None
    multimodal_inputs: Any = None
    validation_error: str | None = None  # non-nil: the engine finishes the request with "abort"
    data_parallel_rank: int | None = None


def build_request(
    request: EngineRequest,
    *,
    engine_request_id: str,
    max_model_len: int,
    vocab_size: int | None = None,
    stream: bool = True,
) -> TokenizedGenerateReqInput:
    """One ADD for a finalized `request`, in TokenSpeed's normalized form (docs/wire.md §B.4, §E.22).

    Finalize already refused what TokenSpeed cannot do (top logprobs, top_k >= 128); here the
    values are only spelled TokenSpeed's way and checked against the engine's context.
    `stream=True` makes the engine emit every `stream_interval` tokens; False batches 50.
    """
    if not engine_request_id:
        raise ClientError("the engine request id must not be empty", param="request_id")
    s = request.sampling
    prompt = checked_prompt(request.prompt_ids, max_model_len, vocab_size)
    max_tokens, min_tokens = token_budget(
        s.max_tokens, s.min_tokens, prompt_len=len(prompt), max_model_len=max_model_len
    )
    top_k = -1 if s.top_k is None else checked_int(s.top_k, "top_k")
    temperature = 1.0 if s.temperature is None else float(s.temperature)
    seed = None if s.seed is None else checked_int(s.seed, "seed")
    # TokenSpeed's normalize(), applied here since we send is_normalized=true: greedy is
    # spelled top_k=1 with temperature 1 and seed 0 (so that ties break the same every time).
    if temperature < _GREEDY_BELOW:
        temperature, top_k = 1.0, 1
    if top_k == 1:
        seed = 0
    params = TokenSpeedSamplingParams(
        max_new_tokens=checked_int(max_tokens, "max_tokens"),
        stop_token_ids=checked_ids(s.stop_token_ids, "stop_token_ids", vocab_size) or None,
        temperature=temperature,
        top_p=_float(s.top_p, 1.0),
        top_k=TOP_K_DISABLED if top_k in (-1, 0) else top_k,
        min_p=_float(s.min_p, 0.0),
        frequency_penalty=_float(s.frequency_penalty, 0.0),
        presence_penalty=_float(s.presence_penalty, 0.0),
        repetition_penalty=_float(s.repetition_penalty, 1.0),
        min_new_tokens=checked_int(min_tokens, "min_tokens"),
        ignore_eos=s.ignore_eos,
        skip_special_tokens=s.skip_special_tokens,
        spaces_between_special_tokens=s.spaces_between_special_tokens,
        no_stop_trim=s.no_stop_trim,
        logit_bias=_logit_bias(s.logit_bias, vocab_size),
        seed=seed,
        stop_strs=[],
        json_schema=_constraint(s.constraint, ConstraintKind.JSON_SCHEMA),
        regex=_constraint(s.constraint, ConstraintKind.REGEX),
        ebnf=_constraint(s.constraint, ConstraintKind.GRAMMAR),
        is_normalized=True,
    )
    return TokenizedGenerateReqInput(
        rid=engine_request_id,
        input_ids=prompt,
        sampling_params=params,
        return_logprob=s.logprobs is not None,
        stream=stream,
    )


def _float(value: float | None, default: float) -> float:
    return default if value is None else float(value)


def _logit_bias(
    pairs: tuple[tuple[int, float], ...], vocab_size: int | None
) -> dict[str, float] | None:
    """TokenSpeed's logit_bias map takes string token-id keys (wire.md §B.4)."""
    if not pairs:
        return None
    checked_ids([token_id for token_id, _ in pairs], "logit_bias", vocab_size)
    return {str(token_id): bias for token_id, bias in pairs}


def _constraint(constraint: StructuredConstraint | None, kind: ConstraintKind) -> str | None:
    """The constraint's text in the field of its kind; finalize rewrote choices and JSON mode
    to a schema or a regex, the only kinds TokenSpeed takes besides EBNF."""
    return constraint.text if constraint is not None and constraint.kind is kind else None


class BatchTokenIDOutSlim(
    msgspec.Struct,
    tag="BatchTokenIDOutSlim",
    tag_field="_tag",
    array_like=True,
    frozen=True,
    kw_only=True,
):
    """One output message: parallel columns, one entry per request id in `rids`."""

    rids: tuple[str, ...] | None = None
    output_ids: tuple[tuple[int, ...], ...]  # new tokens since the last frame (delta)
    finished_reasons: tuple[str, ...]  # "" while running
    prompt_tokens: tuple[int, ...]
    completion_tokens: tuple[int, ...]  # cumulative
    cached_tokens: tuple[int, ...]
    output_token_logprobs_val: tuple[tuple[float, ...], ...]  # () per request without logprobs
    output_token_logprobs_idx: tuple[tuple[int, ...], ...]
    engine_index: int = 0
    num_running: int = 0
    num_waiting: int = 0
    kv_active_pages: int = 0
    kv_total_pages: int = 0


class OutputRow(msgspec.Struct, frozen=True, kw_only=True):
    """One request's slice of a batch."""

    rid: str
    output_ids: tuple[int, ...]
    finished_reason: str = ""  # raw; see finish_reason_text
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    logprobs: tuple[float, ...] = ()  # of the sampled tokens, parallel to logprob_token_ids
    logprob_token_ids: tuple[int, ...] = ()


def finish_reason_text(raw: str) -> str | None:
    """None while running; stop/length/abort/error kept; anything else is "stop" (callers may
    warn when `raw not in FINISH_REASONS`)."""
    if not raw:
        return None
    return raw if raw in FINISH_REASONS else "stop"


def split_batch(batch: BatchTokenIDOutSlim) -> tuple[OutputRow, ...]:
    """The batch's rows; every column must have one entry per request id."""
    rids = batch.rids or ()
    columns = (
        batch.output_ids,
        batch.finished_reasons,
        batch.prompt_tokens,
        batch.completion_tokens,
        batch.cached_tokens,
        batch.output_token_logprobs_val,
        batch.output_token_logprobs_idx,
    )
    if any(len(column) != len(rids) for column in columns):
        lengths = [len(column) for column in columns]
        raise BackendProtocolError(f"ragged output batch: {len(rids)} rids, columns {lengths}")
    return tuple(
        OutputRow(
            rid=rid,
            output_ids=batch.output_ids[i],
            finished_reason=batch.finished_reasons[i],
            prompt_tokens=batch.prompt_tokens[i],
            completion_tokens=batch.completion_tokens[i],
            cached_tokens=batch.cached_tokens[i],
            logprobs=batch.output_token_logprobs_val[i],
            logprob_token_ids=batch.output_token_logprobs_idx[i],
        )
        for i, rid in enumerate(rids)
    )


def build_batch(
    rows: Sequence[OutputRow],
    *,
    engine_index: int = 0,
    num_running: int = 0,
    num_waiting: int = 0,
    kv_active_pages: int = 0,
    kv_total_pages: int = 0,
) -> BatchTokenIDOutSlim:
    """Engine side: rows to columns, with the 0.1.1 load tail."""
    return BatchTokenIDOutSlim(
        rids=tuple(row.rid for row in rows),
        output_ids=tuple(row.output_ids for row in rows),
        finished_reasons=tuple(row.finished_reason for row in rows),
        prompt_tokens=tuple(row.prompt_tokens for row in rows),
        completion_tokens=tuple(row.completion_tokens for row in rows),
        cached_tokens=tuple(row.cached_tokens for row in rows),
        output_token_logprobs_val=tuple(row.logprobs for row in rows),
        output_token_logprobs_idx=tuple(row.logprob_token_ids for row in rows),
        engine_index=engine_index,
        num_running=num_running,
        num_waiting=num_waiting,
        kv_active_pages=kv_active_pages,
        kv_total_pages=kv_total_pages,
    )


class TokenSpeedHandshakeMessage(msgspec.Struct, frozen=True):
    """TokenSpeed's HELLO/READY: all four keys, always (decode with zmq_transport's decoder)."""

    status: str
    local: bool = True
    headless: bool = True
    parallel_config_hash: str | None = None


class ReadyResponse(msgspec.Struct, frozen=True):
    """TokenSpeed's registration map: all keys sent; `prefix_granularity`, not `block_size`."""

    max_model_len: int
    num_gpu_blocks: int = 0
    prefix_granularity: int = 0
    dp_stats_address: str | None = None
    dtype: str = "bfloat16"  # one of bfloat16, float16, float32
    multimodal_encoder_dtype: str | None = None
    vllm_version: str = ""  # "tokenspeed-<version>"
    world_size: int = 1
    data_parallel_size: int = 1
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    data_parallel_rank: int = 0
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    instance_id: str = ""
    kv_cache_size_tokens: int | None = None
    kv_cache_max_concurrency: float | None = None
    kv_events_config: dict[str, Any] | None = None


_ENCODER: Final = msgspec.msgpack.Encoder()
_REQUEST_DECODER: Final = msgspec.msgpack.Decoder(TokenizedGenerateReqInput)
_OUTPUTS_DECODER: Final = msgspec.msgpack.Decoder(BatchTokenIDOutSlim)
_READY_DECODER: Final = msgspec.msgpack.Decoder(ReadyResponse)


def encode_request(request: TokenizedGenerateReqInput) -> bytes:
    return _ENCODER.encode(request)


def decode_request(payload: bytes) -> TokenizedGenerateReqInput:
    """Engine side; the engine's own checks (n, logprob options, verify) are the caller's."""
    return decode_message(_REQUEST_DECODER, payload, "TokenizedGenerateReqInput")


def encode_outputs(batch: BatchTokenIDOutSlim) -> bytes:
    return _ENCODER.encode(batch)


def decode_outputs(frames: Sequence[bytes]) -> BatchTokenIDOutSlim:
    """Decode `frames[0]` (the slim batch uses no aux frames). Check the dead sentinel first."""
    if not frames:
        raise BackendProtocolError("empty output message")
    return decode_message(_OUTPUTS_DECODER, frames[0], "BatchTokenIDOutSlim")


def encode_handshake(status: str) -> bytes:
    """Engine side HELLO/READY: `{status, local: true, headless: true, parallel_config_hash: nil}`."""
    return _ENCODER.encode(TokenSpeedHandshakeMessage(status=status))


def encode_ready_response(response: ReadyResponse) -> bytes:
    return _ENCODER.encode(response)


def decode_ready_response(payload: bytes) -> ReadyResponse:
    response = decode_message(_READY_DECODER, payload, "registration (ready response)")
    if response.max_model_len < 2:
        raise BackendProtocolError(f"engine reports max_model_len {response.max_model_len}")
    return response
