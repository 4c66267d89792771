"""Pure. vLLM EngineCore's inbound msgpack (vLLM 0.32/0.33, docs/wire.md §A.3-A.6, §A.9): the ADD
request and its sampling map, UTILITY calls, and the registration map the engine sends first.
The outputs stream is in `vllm_zmq_outputs`; frames and the handshake in `zmq_transport`.

Layouts are the contract. `EngineCoreRequest` and `UtilityCall` are positional arrays;
`VllmSamplingParams` and the registration map are maps. We encode the exact 22-element request
of 0.32/0.33 (older engines ignore trailing extras); decoders accept the 9-element required
prefix and ignore extra trailing elements and unknown map keys.

`build_request` renames a finalized neutral request onto these layouts: finalize decided the
stop ids and EOS fields, the client's values were range-checked at decode. A malformed ADD can
still kill EngineCore's input thread, so the builder checks what only it can: the prompt against
the engine's context and vocabulary, and that every integer fits msgpack (docs/wire.md §A.5, §E.12);
a failure is a `ClientError` naming the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, assert_never

import msgspec

from smg_trio.errors import BackendProtocolError, ClientError
from smg_trio.neutral.sampling import ConstraintKind, EngineRequest, StructuredConstraint
from smg_trio.neutral.validation import checked_ids, checked_prompt, token_budget
from smg_trio.wire.msgpack_ints import checked_int
from smg_trio.wire.zmq_transport import decode_message

VLLM_DEFAULT_MAX_TOKENS: Final = 16  # what EngineCore assumes when the key is absent
# The grammar backend EngineCore compiles a constraint with. vLLM's frontend resolves its
# default "auto" to xgrammar, writes the result here and marks it automatic; EngineCore never
# resolves it itself (it builds its one backend from the first constrained request's).
VLLM_GRAMMAR_BACKEND: Final = "xgrammar"


class VllmStructuredOutputs(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """vLLM's StructuredOutputsParams map (wire.md §A.6.2): exactly one constraint key set.

    `choice` is decoded only: EngineCore's grammar backends compile no choice, so vLLM's front
    end (and finalize, `core/constraint_forms.py`) sends it as a `grammar`. `structural_tag` is
    decoded only too: the gateway refuses it (docs/request-fields.md §2).
    """

    json: str | None = None  # the JSON schema, serialized
    regex: str | None = None
    choice: tuple[str, ...] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    structural_tag: str | None = None
    backend: str | None = msgspec.field(default=None, name="_backend")
    backend_was_auto: bool = msgspec.field(default=False, name="_backend_was_auto")


class VllmSamplingParams(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """vLLM's SamplingParams map: the keys we use, in vLLM's order and with vLLM's defaults.

    `build_request` leaves out every key equal to its default but always sends a concrete
    `max_tokens`. Decoding (the reference engine's side) accepts an absent `max_tokens`, as
    vLLM's own frontend omits it when it is 16: read it with `effective_max_tokens`. Decoding
    ignores keys we do not model (LoRA, extra args, ...) and fills vLLM's defaults.
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
    structured_outputs: VllmStructuredOutputs | None = None
    logit_bias: dict[int, float] | None = None  # integer token-id keys
    allowed_token_ids: tuple[int, ...] | None = None
    bad_words_token_ids: tuple[tuple[int, ...], ...] | None = msgspec.field(
        default=None, name="_bad_words_token_ids"
    )
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
    request: EngineRequest,
    *,
    engine_request_id: str,
    max_model_len: int,
    arrival_time: float,
    vocab_size: int | None = None,
    client_index: int = 0,
    external_req_id: str | None = None,
    cache_salt: str | None = None,
    priority: int = 0,
    trace_headers: Mapping[str, str] | None = None,
    mm_features: list[dict[str, Any]] | None = None,
) -> EngineCoreRequest:
    """One ADD for a finalized `request`. `max_model_len` comes from the engine's registration.

    Only renames and byte checks happen here: finalize already decided the stop ids and the EOS
    fields. An unset max_tokens becomes the rest of the engine's context, as vLLM's frontend
    sends it. `mm_features`: the images, encoded (`vllm_mm_features`), their frames the caller's. Uniqueness of `engine_request_id` among in-flight requests is the caller's job: a
    duplicate kills EngineCore.
    """
    if not engine_request_id:
        raise ClientError("the engine request id must not be empty", param="request_id")
    s = request.sampling
    prompt = checked_prompt(request.prompt_ids, max_model_len, vocab_size)
    max_tokens, min_tokens = token_budget(
        s.max_tokens, s.min_tokens, prompt_len=len(prompt), max_model_len=max_model_len
    )
    max_tokens, min_tokens = (
        checked_int(max_tokens, "max_tokens"),
        checked_int(min_tokens, "min_tokens"),
    )
    top_k = 0 if s.top_k is None else checked_int(s.top_k, "top_k")
    params = _sparse_sampling(
        presence_penalty=_float(s.presence_penalty, 0.0),
        frequency_penalty=_float(s.frequency_penalty, 0.0),
        repetition_penalty=_float(s.repetition_penalty, 1.0),
        temperature=_float(s.temperature, 1.0),
        top_p=_float(s.top_p, 1.0),
        top_k=max(top_k, 0),  # vLLM spells "all tokens" 0; the neutral -1 means the same
        min_p=_float(s.min_p, 0.0),
        seed=None if s.seed is None else checked_int(s.seed, "seed"),
        stop_token_ids=checked_ids(s.stop_token_ids, "stop_token_ids", vocab_size) or None,
        ignore_eos=s.ignore_eos,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        logprobs=None if s.logprobs is None else checked_int(s.logprobs, "logprobs"),
        prompt_logprobs=(
            None if s.prompt_logprobs is None else checked_int(s.prompt_logprobs, "prompt_logprobs")
        ),
        structured_outputs=_structured_outputs(s.constraint),
        logit_bias=_logit_bias(s.logit_bias, vocab_size),
        allowed_token_ids=(
            None
            if s.allowed_token_ids is None
            else checked_ids(s.allowed_token_ids, "allowed_token_ids", vocab_size)
        ),
        bad_words_token_ids=tuple(
            checked_ids(ids, "bad_words", vocab_size) for ids in s.bad_words_token_ids
        )
        or None,
        eos_token_id=s.eos_token_id,
        all_stop_token_ids=s.all_stop_token_ids,
    )
    return EngineCoreRequest(
        request_id=engine_request_id,
        prompt_token_ids=prompt,
        mm_features=mm_features,
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
        reasoning_ended=_reasoning_ended(s.constraint),
    )


def _reasoning_ended(constraint: StructuredConstraint | None) -> bool | None:
    """vLLM's gate for a grammar after reasoning (docs/wire.md §A.5): false makes EngineCore
    (launched with a reasoning parser) constrain only what follows the reasoning's end."""
    if constraint is None or constraint.after_reasoning is None:
        return None
    return not constraint.after_reasoning


def _structured_outputs(constraint: StructuredConstraint | None) -> VllmStructuredOutputs | None:
    """The neutral constraint under vLLM's key for its kind, with the backend vLLM's front end
    resolves `auto` to."""
    if constraint is None:
        return None
    kind = constraint.kind
    match kind:
        case ConstraintKind.JSON_SCHEMA:
            keyed = VllmStructuredOutputs(json=constraint.text)
        case ConstraintKind.REGEX:
            keyed = VllmStructuredOutputs(regex=constraint.text)
        case ConstraintKind.GRAMMAR:
            keyed = VllmStructuredOutputs(grammar=constraint.text)
        case ConstraintKind.JSON_OBJECT:
            keyed = VllmStructuredOutputs(json_object=True)
        case ConstraintKind.CHOICE:  # pragma: no cover - finalize made it a grammar
            raise AssertionError("EngineCore takes a choice only as vLLM's grammar")
        case _:  # pragma: no cover - exhaustive
            assert_never(kind)
    return msgspec.structs.replace(keyed, backend=VLLM_GRAMMAR_BACKEND, backend_was_auto=True)


def _logit_bias(
    pairs: tuple[tuple[int, float], ...], vocab_size: int | None
) -> dict[int, float] | None:
    if not pairs:
        return None
    checked_ids([token_id for token_id, _ in pairs], "logit_bias", vocab_size)
    return dict(pairs)


def _float(value: float | None, default: float) -> float:
    """msgpack carries a float: an int the client sent (1) is sent as 1.0, as vLLM's is."""
    return default if value is None else float(value)


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
