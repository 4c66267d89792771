"""Pure. The plan's common part: a request's sampling fields mapped onto `SamplingParams`, the
room the context leaves for output, the router's stop rules, and prompt ids checked against the
vocabulary (docs/limits.md §1, docs/stops-and-finalize.md §2.5).
"""

from __future__ import annotations

from collections.abc import Sequence

from smg_trio.core.plan import GeneratePlan, StopSpec
from smg_trio.core.prompt_bound import truncated
from smg_trio.core.prompt_model import PromptModel
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ClientError
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.neutral.validation import (
    check_context_length,
    checked_allowed_token_ids,
    checked_logit_bias,
)
from smg_trio.wire import openai as oa
from smg_trio.wire.openai_decode import requested_constraint


def stop_spec_for(
    sampling: SamplingParams, tokenizer: TokenizerLike, eos_token_id: int | None = None
) -> StopSpec:
    """The router's stop rules for a request, from what the client asked (docs/stops-and-finalize.md §2.5, §3.1).

    Built before finalize rewrites the engine's stops, so it is the same on every runtime.
    """
    token_ids: list[int] = [] if sampling.ignore_eos else list(tokenizer.eos_token_ids)
    for token_id in sampling.stop_token_ids:
        if token_id not in token_ids:
            token_ids.append(token_id)
    return StopSpec(
        strings=tuple(s for s in sampling.stop if s),
        token_ids=tuple(token_ids),
        skip_special_tokens=sampling.skip_special_tokens,
        no_stop_trim=sampling.no_stop_trim,
        min_tokens=sampling.min_tokens,
        eos_token_id=None if sampling.ignore_eos else eos_token_id,
    )


def sampled_plan(
    req: oa.ChatCompletionRequest | oa.CompletionRequest,
    model: PromptModel,
    *,
    endpoint: Endpoint,
    request_id: str,
    prompt_ids: tuple[int, ...],
    prompt_param: str,
    max_tokens: int | None,
    logprobs: int | None,
    echo_text: str | None,
) -> GeneratePlan:
    prompt_ids = truncated(prompt_ids, req.truncate_prompt_tokens, model.context_length)
    max_tokens = room_capped_max_tokens(len(prompt_ids), max_tokens, model, prompt_param)
    if max_tokens is not None and req.min_tokens > max_tokens:
        raise ClientError(
            f"min_tokens ({req.min_tokens}) must not exceed max_tokens ({max_tokens}), the "
            "room the context leaves",
            param="min_tokens",
        )
    sampling = SamplingParams(
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        min_p=req.min_p,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        repetition_penalty=req.repetition_penalty,
        seed=req.seed,
        max_tokens=max_tokens,
        min_tokens=req.min_tokens,
        logprobs=logprobs,
        ignore_eos=req.ignore_eos,
        skip_special_tokens=req.skip_special_tokens,
        spaces_between_special_tokens=req.spaces_between_special_tokens,
        no_stop_trim=req.keep_stop_text,
        stop=req.stop_strings,
        stop_token_ids=tuple(req.stop_token_ids or ()),
        constraint=requested_constraint(req),
        logit_bias=checked_logit_bias(req.logit_bias, "logit_bias", model.vocab_size),
        allowed_token_ids=checked_allowed_token_ids(
            req.allowed_token_ids, "allowed_token_ids", model.vocab_size
        ),
        bad_words=tuple(req.bad_words or ()),
    )
    force_usage = model.frontend.force_include_usage
    return GeneratePlan(
        request_id=request_id,
        endpoint=endpoint,
        model=req.model or model.name,
        prompt_ids=prompt_ids,
        sampling=sampling,
        n=req.num_choices,
        stream=req.is_stream,
        # vLLM's --enable-force-include-usage: every stream has usage, on every chunk too.
        include_usage=req.include_usage or (force_usage and req.is_stream),
        continuous_usage=req.continuous_usage or (force_usage and req.is_stream),
        echo_text=echo_text,
        stop_spec=stop_spec_for(sampling, model.tokenizer, model.eos_token_id),
        # vLLM's rule: a request's stream_interval can only raise the server's.
        stream_interval=max(req.stream_interval or 1, model.stream_interval),
        return_token_ids=bool(req.return_token_ids),
        # vLLM's: the request's own return_tokens_as_token_ids wins over the server's flag.
        tokens_as_ids=(
            model.frontend.return_tokens_as_token_ids
            if req.return_tokens_as_token_ids is None
            else req.return_tokens_as_token_ids
        ),
        prompt_tokens_details=model.frontend.prompt_tokens_details,
    )


def room_capped_max_tokens(
    prompt_len: int, requested: int | None, model: PromptModel, param: str
) -> int | None:
    """The room the context leaves caps max_tokens, and an unset one is all of it (as vLLM:
    min(requested, context - prompt)); a prompt that leaves no room at all is a 400."""
    if prompt_len == 0:
        raise ClientError(f"the {param} is empty after tokenization", param=param)
    if model.context_length is None:
        return requested
    check_context_length(prompt_len, requested, model.context_length, param)
    room = model.context_length - prompt_len
    return room if requested is None else min(requested, room)


def checked_prompt_ids(ids: Sequence[int], vocab_size: int, param: str) -> tuple[int, ...]:
    for token_id in ids:
        if not 0 <= token_id < vocab_size:
            raise ClientError(
                f"token id {token_id} in {param} is outside the vocabulary [0, {vocab_size})",
                param=param,
            )
    return tuple(ids)
