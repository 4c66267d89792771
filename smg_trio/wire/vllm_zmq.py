"""Pure. vLLM EngineCore's inbound msgpack (vLLM 0.32/0.33, wire.md §A.3-A.6, §A.9): the ADD
request and its sampling map, UTILITY calls, and the registration map the engine sends first.
The outputs stream is in `vllm_zmq_outputs`; frames and the handshake in `zmq_transport`.

Layouts are the contract. `EngineCoreRequest` and `UtilityCall` are positional arrays;
`VllmSamplingParams` and the registration map are maps. We encode the exact 22-element request
of 0.32/0.33 (older engines ignore trailing extras); decoders accept the 9-element required
prefix and ignore extra trailing elements and unknown map keys.

A malformed ADD can kill EngineCore's input thread, so `build_request` validates every value
first and raises `ClientError` naming the parameter (wire.md §A.5, §E.12).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from smg_trio.errors import BackendProtocolError, ClientError
from smg_trio.wire.sampling_checks import (
    checked_ids,
    checked_int,
    checked_prompt,
    float_in,
    positive_float,
    token_budget,
)
from smg_trio.wire.zmq_transport import decode_message

VLLM_DEFAULT_MAX_TOKENS: Final = 16  # what EngineCore assumes when the key is absent
MAX_LOGPROBS: Final = 20  # vLLM's default max_logprobs; EngineCore itself does not check it


class EosIds(msgspec.Struct, frozen=True):
    """The model directory's EOS ids (stops-and-finalize.md §2.2): `extra` excludes `primary`."""

    primary: int | None = None
    extra: tuple[int, ...] = ()


class VllmSampling(msgspec.Struct, frozen=True, kw_only=True):
    """What the gateway asks of one engine request. `None` = vLLM's default for that knob.

    `stop_token_ids` are the ids the engine must stop on (string stops never reach EngineCore).
    `n` does not exist here: n > 1 is fanned out into separate requests before encoding.
    """

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # 0 or -1: all tokens
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    max_tokens: int | None = None  # None: the rest of the context window
    min_tokens: int = 0
    logprobs: int | None = None  # top-k logprobs per sampled token
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()


class VllmSamplingParams(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """vLLM's SamplingParams map: the keys we use, in vLLM's order and with vLLM's defaults.

    `build_request` leaves out every key equal to its default but always sends a concrete
    `max_tokens`. Decoding (the reference engine's side) accepts an absent `max_tokens`, as
    vLLM's own frontend omits it when it is 16: read it with `effective_max_tokens`. Decoding
    ignores keys we do not model (structured outputs, logit bias, ...) and fills vLLM's defaults.
    """

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = None  # None only when decoded from a map without the key
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    eos_token_id: int | None = msgspec.field(default=None, name="_eos_token_id")
    all_stop_token_ids: tuple[int, ...] = msgspec.field(default=(), name="_all_stop_token_ids")

    @property
    def effective_max_tokens(self) -> int:
        """What the engine uses: an absent key means vLLM's default of 16."""
        return VLLM_DEFAULT_MAX_TOKENS if self.max_tokens is None else self.max_tokens


class EngineCoreRequest(msgspec.Struct, array_like=True, frozen=True):
    """The ADD payload (0x00), positional; the first 9 elements are required."""

    request_id: str
    prompt_token_ids: tuple[int, ...] | None
    mm_features: Any
    sampling_params: VllmSamplingParams | None
    pooling_params: Any
    arrival_time: float
    lora_request: Any
    cache_salt: str | None
    data_parallel_rank: int | None
    prompt_embeds: Any = None
    prompt_is_token_ids: tuple[bool, ...] | None = None
    client_index: int = 0  # index into INIT's `outputs`: 0 with one output socket
    current_wave: int = 0
    priority: int = 0
    trace_headers: dict[str, str] | None = None
    resumable: bool = False
    external_req_id: str | None = None
    reasoning_ended: bool | None = None
    reasoning_parser_kwargs: dict[str, Any] | None = None
    abort_immediately: bool = False
    session_id: str | None = None
    kv_hints: Any = None


def build_request(
    *,
    request_id: str,
    prompt_ids: Sequence[int],
    sampling: VllmSampling,
    eos: EosIds,
    max_model_len: int,
    arrival_time: float,
    vocab_size: int | None = None,
    client_index: int = 0,
    external_req_id: str | None = None,
    cache_salt: str | None = None,
    priority: int = 0,
    trace_headers: Mapping[str, str] | None = None,
) -> EngineCoreRequest:
    """Validate and shape one ADD. `max_model_len` comes from the engine's registration map.

    EOS (stops-and-finalize.md §2.4): unless `ignore_eos`, `eos.primary` becomes `_eos_token_id`
    and `eos.extra` ids are appended to `stop_token_ids`; `_all_stop_token_ids` (min_tokens
    masking) is the union of all of them either way. Uniqueness of `request_id` among in-flight
    requests is the caller's job: a duplicate kills EngineCore.
    """
    if not request_id:
        raise ClientError("the engine request id must not be empty", param="request_id")
    prompt = checked_prompt(prompt_ids, max_model_len, vocab_size)
    stop_ids = list(
        dict.fromkeys(checked_ids(sampling.stop_token_ids, "stop_token_ids", vocab_size))
    )
    if not sampling.ignore_eos:
        stop_ids += [token_id for token_id in eos.extra if token_id not in stop_ids]
    eos_ids = (() if eos.primary is None else (eos.primary,)) + eos.extra
    params = _sparse_sampling(
        **_checked_sampling(sampling, prompt_len=len(prompt), max_model_len=max_model_len),
        stop_token_ids=tuple(stop_ids) or None,
        eos_token_id=None if sampling.ignore_eos else eos.primary,
        all_stop_token_ids=tuple(sorted({*stop_ids, *eos_ids})),
    )
    return EngineCoreRequest(
        request_id=request_id,
        prompt_token_ids=prompt,
        mm_features=None,
        sampling_params=params,
        pooling_params=None,
        arrival_time=float(arrival_time),
        lora_request=None,
        cache_salt=cache_salt,
        data_parallel_rank=None,
        client_index=client_index,
        priority=checked_int(priority, "priority"),
        trace_headers=None if trace_headers is None else dict(trace_headers),
        external_req_id=external_req_id,
    )


def _checked_sampling(
    sampling: VllmSampling, *, prompt_len: int, max_model_len: int
) -> dict[str, Any]:
    """Enforce what vLLM's SamplingParams.__post_init__ enforces, before the engine sees it."""
    max_tokens, min_tokens = token_budget(
        sampling.max_tokens, sampling.min_tokens, prompt_len=prompt_len, max_model_len=max_model_len
    )
    top_k = 0 if sampling.top_k is None else checked_int(sampling.top_k, "top_k")
    if top_k < -1:
        raise ClientError(f"top_k must be 0 or -1 (all) or >= 1, got {top_k}", param="top_k")
    logprobs = None if sampling.logprobs is None else checked_int(sampling.logprobs, "logprobs")
    if logprobs is not None and not 0 <= logprobs <= MAX_LOGPROBS:
        raise ClientError(
            f"logprobs must be in [0, {MAX_LOGPROBS}], got {logprobs}", param="logprobs"
        )
    return {
        "presence_penalty": float_in(sampling.presence_penalty, 0.0, "presence_penalty", -2.0, 2.0),
        "frequency_penalty": float_in(
            sampling.frequency_penalty, 0.0, "frequency_penalty", -2.0, 2.0
        ),
        "repetition_penalty": positive_float(
            sampling.repetition_penalty, 1.0, "repetition_penalty", math.inf
        ),
        "temperature": float_in(sampling.temperature, 1.0, "temperature", 0.0, 2.0),
        "top_p": positive_float(sampling.top_p, 1.0, "top_p", 1.0),
        "top_k": max(top_k, 0),
        "min_p": float_in(sampling.min_p, 0.0, "min_p", 0.0, 1.0),
        "seed": None if sampling.seed is None else checked_int(sampling.seed, "seed"),
        "ignore_eos": sampling.ignore_eos,
        "max_tokens": max_tokens,
        "min_tokens": min_tokens,
        "logprobs": logprobs,
    }


_SAMPLING_DEFAULTS: Final = {
    field.name: field.default
    for field in msgspec.structs.fields(VllmSamplingParams)
    if field.default is not msgspec.NODEFAULT
}


def _sparse_sampling(**values: Any) -> VllmSamplingParams:
    """Leave out every value equal to vLLM's default, so that the map omits it.

    msgspec's omit_defaults compares by identity: a computed 1.0 is not the default 1.0.
    """
    sparse = {
        name: value
        for name, value in values.items()
        if name not in _SAMPLING_DEFAULTS or value != _SAMPLING_DEFAULTS[name]
    }
    return VllmSamplingParams(**sparse)


class UtilityCall(msgspec.Struct, array_like=True, frozen=True):
    """UTILITY payload (0x03): the engine runs `method(*args)` and answers with a UtilityOutput."""

    client_index: int
    call_id: int  # caller-chosen u64; -1 and -2 are reserved by vLLM
    method: str
    args: tuple[Any, ...] = ()


class ReadyResponse(msgspec.Struct, frozen=True):
    """The registration map an engine sends first on the input socket (vLLM 0.32 key set).

    Decoded loosely: only `max_model_len` is required (it is the context length after KV
    auto-fit, the one to default max_tokens with); 0.33's extra keys are ignored.
    """

    max_model_len: int
    num_gpu_blocks: int = 0
    block_size: int = 16
    dp_stats_address: str | None = None
    dtype: str = ""
    vllm_version: str = ""
    world_size: int = 1
    data_parallel_size: int = 1
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    data_parallel_rank: int = 0
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    instance_id: str = ""
    supports_lora: bool = False
    max_loras: int = 0
    mamba_block_size: int | None = None
    kv_cache_size_tokens: int | None = None
    kv_cache_max_concurrency: float | None = None
    kv_events_config: dict[str, Any] | None = None
    weight_transfer_backend: str | None = None
    enable_sleep_mode: bool = False
    supports_draft_weight_updates: bool = False
    effective_attention_block_size: int | None = None


_ENCODER: Final = msgspec.msgpack.Encoder()
_REQUEST_DECODER: Final = msgspec.msgpack.Decoder(EngineCoreRequest)
_UTILITY_DECODER: Final = msgspec.msgpack.Decoder(UtilityCall)
_READY_DECODER: Final = msgspec.msgpack.Decoder(ReadyResponse)


def encode_request(request: EngineCoreRequest) -> bytes:
    return _ENCODER.encode(request)


def decode_request(payload: bytes) -> EngineCoreRequest:
    """Engine side. Multimodal aux frames, if any, stay as indices in the Any-typed fields."""
    return decode_message(_REQUEST_DECODER, payload, "EngineCoreRequest")


def encode_utility_call(call: UtilityCall) -> bytes:
    return _ENCODER.encode(call)


def decode_utility_call(payload: bytes) -> UtilityCall:
    return decode_message(_UTILITY_DECODER, payload, "utility call")


def encode_ready_response(response: ReadyResponse) -> bytes:
    """Engine side: every key is sent, as vLLM's own frontend requires 17 of them."""
    return _ENCODER.encode(response)


def decode_ready_response(payload: bytes) -> ReadyResponse:
    response = decode_message(_READY_DECODER, payload, "registration (ready response)")
    if response.max_model_len < 2:
        raise BackendProtocolError(f"engine reports max_model_len {response.max_model_len}")
    return response
