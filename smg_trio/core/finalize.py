"""Pure. The last request-building step: shape a GeneratePlan for one worker's runtime and wire.

`finalize` is the single polymorphism point over (runtime, wire) (docs/architecture.md §2,
docs/stops-and-finalize.md §1): every per-runtime decision about what the ENGINE is asked is made
here, and the wire builders only rename fields. What the CLIENT sees is always enforced by the
router's stop scanner from `plan.stop_spec`, on every runtime; `Finalized.router_stops` is the
part of it no engine will match.

- Structured outputs, logit_bias, allowed_token_ids, bad_words and min_tokens: carried where the
  engine takes them, else a 400 naming the parameter (`core/engine_fields.py`,
  docs/request-fields.md).
- SGLang gRPC, vLLM ZMQ, TokenSpeed ZMQ are token-only for stops: string stops are stripped;
  each one that encodes to exactly one token becomes a stop token id (dedup, order kept) —
  unless min_tokens is set: the engine would mask that id below min_tokens and so change what
  it samples, so the strings stay router obligations, matched after min_tokens tokens.
- vLLM ZMQ (a tokenizer-less EngineCore) also gets the EOS ids (the tokenizer's and the model
  folder's extra ones) as stop ids, unless ignore_eos, plus `_eos_token_id` (the folder's
  primary EOS) and `_all_stop_token_ids` (what min_tokens masks).
- TokenSpeed ZMQ cannot return top logprobs or take a finite top_k of 128 or more, nor a
  repetition_penalty above 2: the client's error (400 naming the parameter).
- vLLM gRPC, TokenSpeed gRPC, TRT-LLM gRPC keep their strings: the engine matches them too.
- vLLM gRPC and SGLang gRPC chat: skip_special_tokens is forced on (the router detokenizes).
- vLLM gRPC and TRT-LLM completion keep the matched stop in the output when the client asked
  (no_stop_trim); on their other endpoints they never do.
- TRT-LLM: chat and generate send no stop ids (the router enforces the client's); max_tokens is
  required, so an unset one becomes 2048 (chat, generate) or 16 (completion), as smg sends.
- Prompt logprobs (`prompt_logprobs`, completions `echo` + `logprobs`): vLLM ZMQ only, else a 400
  naming the field the client used.
- MLX gRPC has no string-stop field: a request with string stops is the client's error.
- vLLM (both wires) refuses n > 1 with greedy sampling (temperature below 1e-5), as its
  SamplingParams does: a 400 naming `n`, not n identical choices.
- UNSPECIFIED, or a runtime with no adapter for the wire, raises UnsupportedRuntime.
n > 1 becomes n engine requests (`<id>-<i>`, seed + i): no engine wire here fans out for us;
a batched completion does that for each of its prompts (choice i * n + j).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

import msgspec

from smg_trio.core.engine_fields import shape_engine_fields
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ClientError, UnsupportedRuntime
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire, require_adapter
from smg_trio.neutral.sampling import EngineRequest, EosIds, SamplingParams

TRTLLM_DEFAULT_MAX_TOKENS_CHAT: Final = 2048  # chat and generate
TRTLLM_DEFAULT_MAX_TOKENS_COMPLETION: Final = 16
TOKENSPEED_TOP_K_LIMIT: Final = 128  # its fused top-k kernel: a finite top_k must be below this
TOKENSPEED_MAX_REPETITION_PENALTY: Final = 2.0
VLLM_GREEDY_TEMPERATURE: Final = 1e-5  # vLLM's _SAMPLING_EPS: below it sampling is greedy


class WorkerTarget(msgspec.Struct, frozen=True, kw_only=True):
    """What finalize needs to know about the worker a request goes to.

    `eos_ids` are the worker's model folder EOS ids; only vLLM over ZMQ uses them (its
    EngineCore has no tokenizer, so the gateway tells it which ids are EOS).
    """

    runtime: Runtime
    wire: Wire
    eos_ids: EosIds = EosIds()


class Finalized(msgspec.Struct, frozen=True, kw_only=True):
    """The engine requests for one worker, and what the router must still enforce itself.

    `router_stops` is the router's obligation beyond the engine: the client's stop strings
    that this worker's engine never sees (stripped for a token-only engine), so the router's
    stop scanner is the only thing that can end the choice on them. The scanner enforces the
    whole `plan.stop_spec` on every runtime; these strings are the part no engine will match.
    """

    runtime: Runtime
    wire: Wire
    requests: tuple[EngineRequest, ...]
    router_stops: tuple[str, ...]


def finalize(
    plan: GeneratePlan, worker: WorkerTarget, tokenizer: TokenizerLike | None
) -> Finalized:
    """Shape `plan` for `worker`; raise before any I/O when the worker cannot take it."""
    require_adapter(worker.runtime, worker.wire)
    sampling = shape_engine_fields(
        _prompt_logprobs_for(plan, worker), worker.runtime, worker.wire, tokenizer
    )
    obligation: tuple[str, ...] = ()
    # Chat-templated prompts (chat, Responses, Messages) force it, as vLLM's chat does.
    chat = plan.endpoint in (Endpoint.CHAT, Endpoint.RESPONSES, Endpoint.MESSAGES)
    completion = plan.endpoint is Endpoint.COMPLETION
    if worker.runtime is Runtime.VLLM:
        _check_vllm_greedy_n(plan.n, sampling)
    match worker.runtime:
        case Runtime.SGLANG:
            sampling, obligation = _resolve_string_stops(sampling, tokenizer)
            sampling = _skip_special_tokens_for_chat(sampling, chat)
        case Runtime.VLLM if worker.wire is Wire.ZMQ:
            sampling, obligation = _resolve_string_stops(sampling, tokenizer)
            sampling = _fold_eos(sampling, tokenizer, worker.eos_ids)
        case Runtime.TOKENSPEED if worker.wire is Wire.ZMQ:
            _check_tokenspeed_zmq_limits(sampling)
            sampling, obligation = _resolve_string_stops(sampling, tokenizer)
            sampling = msgspec.structs.replace(
                sampling, stop_token_ids=tuple(dict.fromkeys(sampling.stop_token_ids))
            )
        case Runtime.VLLM:  # gRPC: the servicer detokenizes and matches the strings itself
            sampling = _skip_special_tokens_for_chat(sampling, chat)
            sampling = msgspec.structs.replace(
                sampling, no_stop_trim=completion and sampling.no_stop_trim
            )
        case Runtime.TOKENSPEED:
            pass  # gRPC: the servicer detokenizes and matches the strings itself
        case Runtime.TRTLLM:
            default_max_tokens = (
                TRTLLM_DEFAULT_MAX_TOKENS_COMPLETION
                if completion
                else TRTLLM_DEFAULT_MAX_TOKENS_CHAT
            )
            sampling = msgspec.structs.replace(
                sampling,
                # TRT-LLM's chat/generate builders send stop words only; the router enforces
                # the client's ids (docs/stops-and-finalize.md §1.2, case 18).
                stop_token_ids=sampling.stop_token_ids if completion else (),
                no_stop_trim=completion and sampling.no_stop_trim,
                max_tokens=(
                    default_max_tokens if sampling.max_tokens is None else sampling.max_tokens
                ),
            )
        case Runtime.MLX:
            if sampling.stop:
                raise ClientError(
                    "invalid request parameters: the MLX engine cannot take string stop "
                    "sequences; use stop_token_ids",
                    code="invalid_request_parameters",
                    param="stop",
                )
        case Runtime.UNSPECIFIED:  # pragma: no cover - require_adapter raised already
            raise UnsupportedRuntime("the engine runtime must be declared")
        case _:  # pragma: no cover - require_adapter raised already
            raise UnsupportedRuntime(
                f"runtime {worker.runtime.value!r} has no adapter for {worker.wire.value}"
            )
    return Finalized(
        runtime=worker.runtime,
        wire=worker.wire,
        requests=tuple(_fan_out(plan, sampling)),
        router_stops=obligation,
    )


def _prompt_logprobs_for(plan: GeneratePlan, worker: WorkerTarget) -> SamplingParams:
    """Prompt logprobs come back only on vLLM's ZMQ outputs (`new_prompt_logprobs_tensors`);
    no other wire here carries them to the gateway (docs/request-fields.md). Asked for: a 400;
    implied by chat echo: dropped."""
    sampling = plan.sampling
    if sampling.prompt_logprobs is None:
        return sampling
    if worker.runtime is Runtime.VLLM and worker.wire is Wire.ZMQ:
        return sampling
    if plan.prompt_logprobs_param is None:
        return msgspec.structs.replace(sampling, prompt_logprobs=None)
    raise ClientError(
        f"prompt logprobs are not supported on {worker.runtime.value} over "
        f"{worker.wire.value}; only vLLM over ZMQ returns them",
        param=plan.prompt_logprobs_param,
    )


def _skip_special_tokens_for_chat(sampling: SamplingParams, chat: bool) -> SamplingParams:
    """Chat text is detokenized by the router, never the engine: ask the engine to skip."""
    if not chat or sampling.skip_special_tokens:
        return sampling
    return msgspec.structs.replace(sampling, skip_special_tokens=True)


def _check_vllm_greedy_n(n: int, sampling: SamplingParams) -> None:
    temperature = sampling.temperature
    if n > 1 and temperature is not None and temperature < VLLM_GREEDY_TEMPERATURE:
        raise ClientError(f"n must be 1 when using greedy sampling, got {n}", param="n")


def _check_tokenspeed_zmq_limits(sampling: SamplingParams) -> None:
    """What TokenSpeed's engine would refuse (or drop without an answer) over ZMQ."""
    if sampling.logprobs not in (None, 0):
        raise ClientError(
            "TokenSpeed over ZMQ returns only the sampled token's logprob; top logprobs "
            "are not supported",
            code="start_generation_failed",
            param="logprobs",
        )
    top_k = sampling.top_k
    if top_k is not None and not -1 <= top_k < TOKENSPEED_TOP_K_LIMIT:
        raise ClientError(
            f"top_k must be -1 or 0 (all) or in [1, {TOKENSPEED_TOP_K_LIMIT - 1}] on "
            f"TokenSpeed, got {top_k}",
            param="top_k",
        )
    penalty = sampling.repetition_penalty
    if penalty is not None and not 0.0 <= penalty <= TOKENSPEED_MAX_REPETITION_PENALTY:
        raise ClientError(
            f"repetition_penalty must be in [0, {TOKENSPEED_MAX_REPETITION_PENALTY:g}] on "
            f"TokenSpeed, got {penalty}",
            param="repetition_penalty",
        )


def _resolve_string_stops(
    sampling: SamplingParams, tokenizer: TokenizerLike | None
) -> tuple[SamplingParams, tuple[str, ...]]:
    """Strip every string stop; convert the single-token ones to stop ids (docs/stops-and-finalize.md §1.3 step 2)."""
    if not sampling.stop:
        return sampling, ()
    ids = list(sampling.stop_token_ids)
    # With min_tokens the engine masks its stop ids until then: a stop string turned into an id
    # would change the sampled text (vLLM never does it); the scanner alone enforces them.
    if tokenizer is not None and not sampling.min_tokens:
        for text in sampling.stop:
            if not text:
                continue
            encoded = tokenizer.encode(text, add_special_tokens=False)
            # A multi-token stop must never become one of its sub-token ids: the engine would
            # stop too early. Only an exact single-token stop is safe to hand to the engine.
            if len(encoded) == 1 and encoded[0] not in ids:
                ids.append(encoded[0])
    resolved = msgspec.structs.replace(sampling, stop=(), stop_token_ids=tuple(ids))
    return resolved, sampling.stop


def _fold_eos(
    sampling: SamplingParams, tokenizer: TokenizerLike | None, eos: EosIds
) -> SamplingParams:
    """vLLM EngineCore has no tokenizer: tell it the EOS ids (docs/stops-and-finalize.md §2.4).

    Unless `ignore_eos`, the tokenizer's EOS ids, then the folder's extra ones, are appended to
    the stop ids and the folder's primary EOS becomes `eos_token_id`; `all_stop_token_ids`
    (masked below min_tokens) is the union of the stop ids and the folder's EOS ids either way.
    """
    stop_ids = tuple(dict.fromkeys(sampling.stop_token_ids))
    if not sampling.ignore_eos:
        tokenizer_eos = () if tokenizer is None else tokenizer.eos_token_ids
        stop_ids = _append_missing(stop_ids, (*tokenizer_eos, *eos.extra))
    folder_eos = (() if eos.primary is None else (eos.primary,)) + eos.extra
    return msgspec.structs.replace(
        sampling,
        stop_token_ids=stop_ids,
        eos_token_id=None if sampling.ignore_eos else eos.primary,
        all_stop_token_ids=tuple(sorted({*stop_ids, *folder_eos})),
    )


def _append_missing(ids: Sequence[int], extra: Iterable[int]) -> tuple[int, ...]:
    merged = list(ids)
    for token_id in extra:
        if token_id not in merged:
            merged.append(token_id)
    return tuple(merged)


def _fan_out(plan: GeneratePlan, sampling: SamplingParams) -> list[EngineRequest]:
    """One engine request per choice; prompt i's choice j is choice i * n + j (a batched
    completion's prompts each get `n`, seeded as that prompt alone would be)."""
    if plan.choice_count == 1:
        return [
            EngineRequest(
                request_id=plan.request_id,
                choice_index=0,
                prompt_ids=plan.prompt_ids,
                sampling=sampling,
            )
        ]
    return [
        EngineRequest(
            request_id=f"{plan.request_id}-{prompt_index * plan.n + index}",
            choice_index=prompt_index * plan.n + index,
            prompt_ids=prompt.ids,
            sampling=(
                sampling
                if sampling.seed is None
                else msgspec.structs.replace(sampling, seed=sampling.seed + index)
            ),
        )
        for prompt_index, prompt in enumerate(plan.prompts)
        for index in range(plan.n)
    ]
