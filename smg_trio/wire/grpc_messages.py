"""Pure. Generate and Abort requests for the engines' gRPC services, built from neutral inputs.

One builder per engine renames a finalized `EngineRequest` (one choice: fanned out to n=1, and
every per-runtime decision already taken by finalize: stops, skip_special_tokens, no_stop_trim,
TRT-LLM's stop ids and max_tokens) onto that engine's protobuf `GenerateRequest` (docs/wire.md §C).
What differs per engine here is only spelling:

- vLLM: `no_stop_trim` is `include_stop_str_in_output`.
- SGLang: no string-stop field (finalize never sends it any); no seed field: a seed is not sent.
- TokenSpeed: scalars are `optional`, so only what the client set is sent.
- MLX: no string-stop field (finalize refuses string stops for it).
- TRT-LLM: `no_stop_trim` is `include_stop_token_in_output`; `max_tokens` is required.

proto3 zeros are indistinguishable from "unset" for plain scalars, and several servicers read a
zero literally (SGLang temperature 0 = greedy), so every knob with a neutral value is sent
explicitly. Integer values the protobuf field cannot hold are a `ClientError`, never a crash.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol, TypeAlias

from smg_trio.errors import ClientError, UnsupportedRuntime
from smg_trio.neutral.runtime import Runtime
from smg_trio.neutral.sampling import EngineRequest
from smg_trio.neutral.validation import checked_ids
from smg_trio.wire._proto import mlx_engine_pb2 as mlx
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang
from smg_trio.wire._proto import tokenspeed_scheduler_pb2 as tokenspeed
from smg_trio.wire._proto import trtllm_service_pb2 as trtllm
from smg_trio.wire._proto import vllm_engine_pb2 as vllm
from smg_trio.wire.grpc_constraints import (
    int_keys,
    set_sglang_constraint,
    set_vllm_constraint,
    string_keys,
    trtllm_guide,
)
from smg_trio.wire.sglang_grpc_media import sglang_mm_inputs
from smg_trio.wire.vllm_grpc_media import vllm_mm_inputs
from smg_trio.wire.vllm_media_refs import folded_prompt, refs_fit, vllm_media_refs

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
UINT32_MAX: Final = 2**32 - 1
UINT64_MAX: Final = 2**64 - 1


GenerateRequest: TypeAlias = (
    vllm.GenerateRequest
    | sglang.GenerateRequest
    | tokenspeed.GenerateRequest
    | mlx.GenerateRequest
    | trtllm.GenerateRequest
)
AbortRequest: TypeAlias = (
    vllm.AbortRequest
    | sglang.AbortRequest
    | tokenspeed.AbortRequest
    | mlx.AbortRequest
    | trtllm.AbortRequest
)


def build_generate(
    runtime: Runtime,
    request: EngineRequest,
    engine_request_id: str,
    *,
    stream: bool = True,
    prompt_text: str = "",
    media_ref_schemes: frozenset[str] = frozenset(),
) -> GenerateRequest:
    """The `GenerateRequest` of `runtime`'s service for `request`.

    `stream=False`: the engine sends only complete messages. `prompt_text` is the prompt's
    text for the engine's logs; it may stay empty. `media_ref_schemes`: what a vLLM worker
    that processes images itself fetches (docs/images.md §5.1; empty: it does not).
    """
    if runtime is Runtime.VLLM:
        return build_vllm_generate(
            request,
            engine_request_id,
            stream=stream,
            prompt_text=prompt_text,
            media_ref_schemes=media_ref_schemes,
        )
    builder = _GENERATE_BUILDERS.get(runtime)
    if builder is None:
        raise UnsupportedRuntime(f"runtime {runtime.value!r} has no gRPC service")
    return builder(request, engine_request_id, stream=stream, prompt_text=prompt_text)


def build_abort(runtime: Runtime, request_ids: Sequence[str]) -> list[AbortRequest]:
    """Abort calls for `request_ids`: one for vLLM and MLX (they take a list), else one per id."""
    match runtime:
        case Runtime.VLLM:
            return [vllm.AbortRequest(request_ids=request_ids)]
        case Runtime.MLX:
            return [mlx.AbortRequest(request_ids=request_ids)]
        case Runtime.SGLANG:
            return [sglang.AbortRequest(request_id=rid) for rid in request_ids]
        case Runtime.TOKENSPEED:
            return [tokenspeed.AbortRequest(request_id=rid) for rid in request_ids]
        case Runtime.TRTLLM:
            return [trtllm.AbortRequest(request_id=rid) for rid in request_ids]
        case _:
            raise UnsupportedRuntime(f"runtime {runtime.value!r} has no gRPC service")


# Constructors leave a field unset when given None: that is how `optional` fields stay unset.


def build_vllm_generate(
    request: EngineRequest,
    engine_request_id: str,
    *,
    stream: bool = True,
    prompt_text: str = "",
    media_ref_schemes: frozenset[str] = frozenset(),
) -> vllm.GenerateRequest:
    """Images go as `media_refs` when the worker processes them itself and they fit
    (wire/vllm_media_refs.py), else as `mm_inputs` tensors (docs/images.md §5.1)."""
    s = request.sampling
    params = vllm.SamplingParams(
        temperature=s.temperature,  # unset: 1.0
        top_p=_or(s.top_p, 1.0),
        top_k=_all_tokens_as(s.top_k, 0, UINT32_MAX),
        min_p=_or(s.min_p, 0.0),
        frequency_penalty=_or(s.frequency_penalty, 0.0),
        presence_penalty=_or(s.presence_penalty, 0.0),
        repetition_penalty=_or(s.repetition_penalty, 1.0),
        max_tokens=_optional(s.max_tokens, "max_tokens", 1, UINT32_MAX),
        min_tokens=_ranged(s.min_tokens, "min_tokens", 0, UINT32_MAX),
        stop=s.stop,
        stop_token_ids=_ids(s.stop_token_ids),
        skip_special_tokens=s.skip_special_tokens,
        spaces_between_special_tokens=s.spaces_between_special_tokens,
        ignore_eos=s.ignore_eos,
        n=1,
        logprobs=_optional(s.logprobs, "logprobs", 0, INT32_MAX),
        seed=_optional(s.seed, "seed", INT32_MIN, INT32_MAX),
        include_stop_str_in_output=s.no_stop_trim,
        logit_bias=int_keys(s.logit_bias),
    )
    set_vllm_constraint(params, s.constraint)
    media = request.media
    if media and refs_fit(media, request.prompt_ids, media_ref_schemes):
        return vllm.GenerateRequest(
            request_id=engine_request_id,
            tokenized=vllm.TokenizedInput(
                original_text=prompt_text,
                input_ids=_ids(folded_prompt(media, request.prompt_ids), "prompt"),
            ),
            sampling_params=params,
            stream=stream,
            media_refs=vllm_media_refs(media),
        )
    return vllm.GenerateRequest(
        request_id=engine_request_id,
        tokenized=vllm.TokenizedInput(
            original_text=prompt_text, input_ids=_ids(request.prompt_ids, "prompt")
        ),
        sampling_params=params,
        stream=stream,
        mm_inputs=vllm_mm_inputs(media, request.prompt_ids) if media else None,
    )


def build_sglang_generate(
    request: EngineRequest, engine_request_id: str, *, stream: bool = True, prompt_text: str = ""
) -> sglang.GenerateRequest:
    s = request.sampling
    assert not s.stop, "SGLang takes no stop strings: finalize resolves them"
    params = sglang.SamplingParams(
        temperature=_or(s.temperature, 1.0),  # unset would be 0.0: greedy
        top_p=_or(s.top_p, 1.0),
        top_k=_all_tokens_as(s.top_k, -1, INT32_MAX),
        min_p=_or(s.min_p, 0.0),
        frequency_penalty=_or(s.frequency_penalty, 0.0),
        presence_penalty=_or(s.presence_penalty, 0.0),
        repetition_penalty=_or(s.repetition_penalty, 1.0),
        max_new_tokens=_optional(s.max_tokens, "max_tokens", 1, UINT32_MAX),
        stop_token_ids=_ids(s.stop_token_ids),
        skip_special_tokens=s.skip_special_tokens,
        spaces_between_special_tokens=s.spaces_between_special_tokens,
        n=1,
        min_new_tokens=_ranged(s.min_tokens, "min_tokens", 0, UINT32_MAX),
        ignore_eos=s.ignore_eos,
        no_stop_trim=s.no_stop_trim,
        logit_bias=string_keys(s.logit_bias),
    )
    set_sglang_constraint(params, s.constraint)
    return sglang.GenerateRequest(
        request_id=engine_request_id,
        tokenized=sglang.TokenizedInput(
            original_text=prompt_text, input_ids=_ids(request.prompt_ids, "prompt")
        ),
        sampling_params=params,
        return_logprob=s.logprobs is not None,
        top_logprobs_num=_ranged(s.logprobs or 0, "logprobs", 0, INT32_MAX),
        stream=stream,
        mm_inputs=sglang_mm_inputs(request.media, request.prompt_ids) if request.media else None,
    )


def build_tokenspeed_generate(
    request: EngineRequest, engine_request_id: str, *, stream: bool = True, prompt_text: str = ""
) -> tokenspeed.GenerateRequest:
    s = request.sampling
    params = tokenspeed.SamplingParams(
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=_optional_top_k(s.top_k),
        min_p=s.min_p,
        frequency_penalty=s.frequency_penalty,
        presence_penalty=s.presence_penalty,
        repetition_penalty=s.repetition_penalty,
        max_new_tokens=_optional(s.max_tokens, "max_tokens", 1, UINT32_MAX),
        min_new_tokens=_ranged(s.min_tokens, "min_tokens", 0, UINT32_MAX),
        stop=s.stop,
        stop_token_ids=_ids(s.stop_token_ids),
        ignore_eos=s.ignore_eos,
        skip_special_tokens=s.skip_special_tokens,
        spaces_between_special_tokens=s.spaces_between_special_tokens,
        n=1,
        no_stop_trim=s.no_stop_trim,
        sampling_seed=_optional(s.seed, "seed", 0, UINT64_MAX),
        logit_bias=string_keys(s.logit_bias),
    )
    set_sglang_constraint(params, s.constraint)
    return tokenspeed.GenerateRequest(
        request_id=engine_request_id,
        tokenized=tokenspeed.TokenizedInput(
            input_ids=_ids(request.prompt_ids, "prompt"), original_text=prompt_text
        ),
        sampling_params=params,
        return_logprob=s.logprobs is not None,
        top_logprobs_num=_ranged(s.logprobs or 0, "logprobs", 0, INT32_MAX),
        stream=stream,
    )


def build_mlx_generate(
    request: EngineRequest, engine_request_id: str, *, stream: bool = True, prompt_text: str = ""
) -> mlx.GenerateRequest:
    s = request.sampling
    assert not s.stop, "MLX takes no stop strings: finalize refuses them"
    params = mlx.SamplingParams(
        temperature=s.temperature,
        top_p=_or(s.top_p, 1.0),
        top_k=_all_tokens_as(s.top_k, 0, UINT32_MAX),
        min_p=_or(s.min_p, 0.0),
        repetition_penalty=_or(s.repetition_penalty, 1.0),
        frequency_penalty=_or(s.frequency_penalty, 0.0),
        presence_penalty=_or(s.presence_penalty, 0.0),
        max_tokens=_optional(s.max_tokens, "max_tokens", 1, UINT32_MAX),
        stop_token_ids=_ids(s.stop_token_ids),
        ignore_eos=s.ignore_eos,
        logprobs=_optional(s.logprobs, "logprobs", 0, INT32_MAX),
        seed=_optional(s.seed, "seed", INT32_MIN, INT32_MAX),
        logit_bias=int_keys(s.logit_bias),
    )
    return mlx.GenerateRequest(
        request_id=engine_request_id,
        tokenized=mlx.TokenizedInput(
            original_text=prompt_text, input_ids=_ids(request.prompt_ids, "prompt")
        ),
        sampling_params=params,
        stream=stream,
    )


def build_trtllm_generate(
    request: EngineRequest, engine_request_id: str, *, stream: bool = True, prompt_text: str = ""
) -> trtllm.GenerateRequest:
    s = request.sampling
    assert s.max_tokens is not None, "TRT-LLM requires max_tokens: finalize sets a default"
    return trtllm.GenerateRequest(
        request_id=engine_request_id,
        tokenized=trtllm.TokenizedInput(
            original_text=prompt_text,
            input_token_ids=_ids(request.prompt_ids, "prompt"),
        ),
        sampling_config=trtllm.SamplingConfig(
            beam_width=1,
            num_return_sequences=1,
            top_k=_optional_top_k(s.top_k),
            top_p=s.top_p,
            seed=_optional(s.seed, "seed", 0, UINT64_MAX),
            temperature=s.temperature,
            min_tokens=_optional(s.min_tokens or None, "min_tokens", 1, UINT32_MAX),
            repetition_penalty=s.repetition_penalty,
            presence_penalty=s.presence_penalty,
            frequency_penalty=s.frequency_penalty,
            min_p=s.min_p,
        ),
        output_config=trtllm.OutputConfig(logprobs=_optional(s.logprobs, "logprobs", 0, INT32_MAX)),
        max_tokens=_ranged(s.max_tokens, "max_tokens", 1, UINT32_MAX),
        streaming=stream,
        stop=s.stop,
        stop_token_ids=_ids(s.stop_token_ids),
        ignore_eos=s.ignore_eos,
        include_stop_token_in_output=s.no_stop_trim,
        bad=s.bad_words,
        guided_decoding=trtllm_guide(s.constraint),
    )


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _ranged(value: int, param: str, low: int, high: int) -> int:
    """`value` if the protobuf field can hold it and the engine can take it, else a 400."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ClientError(
            f"{param} must be an integer in [{low}, {high}], got {value!r}", param=param
        )
    return value


def _optional(value: int | None, param: str, low: int, high: int) -> int | None:
    return None if value is None else _ranged(value, param, low, high)


def _all_tokens_as(top_k: int | None, all_tokens: int, high: int) -> int:
    """top_k with "all tokens" (None, 0 or -1) spelled the engine's way."""
    if top_k is None or top_k in (0, -1):
        return all_tokens
    return _ranged(top_k, "top_k", 1, high)


def _optional_top_k(top_k: int | None) -> int | None:
    """top_k for an `optional` field: "all tokens" is the engine's default, so left unset."""
    if top_k is None or top_k in (0, -1):
        return None
    return _ranged(top_k, "top_k", 1, INT32_MAX)


def _ids(ids: Sequence[int], param: str = "stop_token_ids") -> tuple[int, ...]:
    return checked_ids(ids, param, None)


class _GenerateBuilder(Protocol):
    def __call__(
        self, request: EngineRequest, engine_request_id: str, *, stream: bool, prompt_text: str
    ) -> GenerateRequest: ...


_GENERATE_BUILDERS: Final[dict[Runtime, _GenerateBuilder]] = {
    Runtime.VLLM: build_vllm_generate,
    Runtime.SGLANG: build_sglang_generate,
    Runtime.TOKENSPEED: build_tokenspeed_generate,
    Runtime.MLX: build_mlx_generate,
    Runtime.TRTLLM: build_trtllm_generate,
}
