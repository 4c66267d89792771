"""Pure. What a worker's engine cannot take, refused before any task starts: a 400 naming the
parameter as the client sent it (docs/request-fields.md).

`refuse_unsupported` reads the worker's row of the capability table
(`neutral/capabilities.py`); it is the only per-runtime refusal of a request's fields. finalize
calls it first, so what it shapes afterwards (`core/engine_fields.py`, the stops) is known to
fit. The checks run in a fixed order: the first field the engine cannot take is the one named.
"""

from __future__ import annotations

from typing import Final

from smg_trio.core.plan import GeneratePlan
from smg_trio.errors import ClientError
from smg_trio.neutral.capabilities import BadWords, Capabilities, StringStops
from smg_trio.neutral.media import ImageInput
from smg_trio.neutral.runtime import Runtime

VLLM_GREEDY_TEMPERATURE: Final = 1e-5  # vLLM's _SAMPLING_EPS: below it sampling is greedy


def refuse_unsupported(plan: GeneratePlan, caps: Capabilities) -> None:
    """Raise the 400 for the first field of `plan` that `caps` says its engine cannot take."""
    sampling = plan.sampling
    if plan.media and caps.images is ImageInput.REFUSED:
        raise ClientError(
            f"{plan.media_params[0]}: images are not supported by this model's engine "
            f"({caps.runtime.value} over {caps.wire.value}: its wire carries no image)",
            code="multimodal_not_supported",
            param=plan.media_params[0],
        )
    # Implied by chat echo (no param): finalize drops them instead.
    if (
        sampling.prompt_logprobs is not None
        and not caps.prompt_logprobs
        and plan.prompt_logprobs_param is not None
    ):
        raise ClientError(
            f"prompt logprobs are not supported on {caps.runtime.value} over "
            f"{caps.wire.value}; only vLLM over ZMQ returns them",
            param=plan.prompt_logprobs_param,
        )
    constraint = sampling.constraint
    if constraint is not None:
        if constraint.after_reasoning and not caps.constraint_after_reasoning:
            # Without `reasoning_ended` the grammar would constrain the reasoning too
            # (docs/request-fields.md §3).
            raise ClientError(
                f"{constraint.param} cannot start after the reasoning on this model's engine "
                f"({caps.runtime.value} over {caps.wire.value}: its wire cannot say where the "
                "grammar starts); turn thinking off with chat_template_kwargs.enable_thinking "
                "false or separate_reasoning false",
                param=constraint.param,
            )
        if not caps.constraints:
            raise ClientError(
                f"{constraint.param}: structured outputs are not supported by this model's "
                f"engine ({caps.runtime.value})",
                param=constraint.param,
            )
        if not caps.accepts(constraint.kind):  # pragma: no cover - no such row today
            raise ClientError(
                f"{constraint.param} is not supported by this model's engine",
                param=constraint.param,
            )
    if sampling.logit_bias and not caps.logit_bias:
        _refuse("logit_bias", caps)
    if sampling.allowed_token_ids is not None and not caps.allowed_token_ids:
        _refuse("allowed_token_ids", caps)
    if sampling.min_tokens and not caps.min_tokens:
        _refuse("min_tokens", caps)
    if sampling.bad_words and caps.bad_words is BadWords.REFUSED:
        _refuse("bad_words", caps)
    temperature = sampling.temperature
    if (
        not caps.greedy_n
        and plan.n > 1
        and temperature is not None
        and temperature < VLLM_GREEDY_TEMPERATURE
    ):
        raise ClientError(f"n must be 1 when using greedy sampling, got {plan.n}", param="n")
    _refuse_out_of_limits(plan, caps)
    if sampling.stop and caps.string_stops is StringStops.REFUSED:
        raise ClientError(
            f"invalid request parameters: the {_NAMES[caps.runtime]} engine "
            "cannot take string stop sequences; use stop_token_ids",
            code="invalid_request_parameters",
            param="stop",
        )


def _refuse_out_of_limits(plan: GeneratePlan, caps: Capabilities) -> None:
    """Values the engine would refuse (or drop without an answer): TokenSpeed over ZMQ."""
    sampling = plan.sampling
    if sampling.logprobs not in (None, 0) and not caps.top_logprobs:
        raise ClientError(
            f"{_NAMES[caps.runtime]} over {caps.wire.value.upper()} returns only the "
            "sampled token's logprob; top logprobs are not supported",
            code="start_generation_failed",
            param="logprobs",
        )
    top_k, limit = sampling.top_k, caps.top_k_below
    if top_k is not None and limit is not None and not -1 <= top_k < limit:
        raise ClientError(
            f"top_k must be -1 or 0 (all) or in [1, {limit - 1}] on "
            f"{_NAMES[caps.runtime]}, got {top_k}",
            param="top_k",
        )
    penalty, highest = sampling.repetition_penalty, caps.max_repetition_penalty
    if penalty is not None and highest is not None and not 0.0 <= penalty <= highest:
        raise ClientError(
            f"repetition_penalty must be in [0, {highest:g}] on "
            f"{_NAMES[caps.runtime]}, got {penalty}",
            param="repetition_penalty",
        )


def _refuse(param: str, caps: Capabilities) -> None:
    raise ClientError(
        f"{param} is not supported by this model's engine ({caps.runtime.value} over "
        f"{caps.wire.value})",
        param=param,
    )


# How the messages above name an engine (as they always have).
_NAMES: Final = {
    Runtime.VLLM: "vLLM",
    Runtime.SGLANG: "SGLang",
    Runtime.TOKENSPEED: "TokenSpeed",
    Runtime.TRTLLM: "TRT-LLM",
    Runtime.MLX: "MLX",
    Runtime.UNSPECIFIED: "unspecified",
}
