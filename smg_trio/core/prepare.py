"""Pure. Client request → GeneratePlan: template, tokenize, map sampling, build the stop spec.

What runs here is everything the gateway decides before it knows which worker will serve the
request, per endpoint: chat (which Messages and Responses share), completions and SGLang's
generate. Tokenization follows transformers: a chat prompt is rendered by the template (which
writes any BOS itself) and encoded WITHOUT adding special tokens again (core/chat_prompt.py); a
completion prompt is encoded WITH them (the tokenizer's post-processor decides what that means).
Prompt token ids given by the client are checked against the vocabulary; they are never
re-tokenized. The common part of every plan (sampling, the room the context leaves, stops) is
core/sampling_plan.py; what a model contributes is core/prompt_model.py.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence

import msgspec

from smg_trio.core.chat_prompt import chat_prompt, chat_prompt_ids
from smg_trio.core.frontend_options import templated_request
from smg_trio.core.harmony_prompt import with_harmony_stops
from smg_trio.core.images import ProcessedImage, chat_image_refs
from smg_trio.core.plan import GeneratePlan, PromptPart
from smg_trio.core.prompt_bound import PromptLimit, bounded_encode, truncated
from smg_trio.core.prompt_model import PromptModel
from smg_trio.core.sampling_plan import (
    checked_prompt_ids,
    room_capped_max_tokens,
    sampled_plan,
    stop_spec_for,
)
from smg_trio.core.tool_choice import with_parsers
from smg_trio.errors import ClientError
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.neutral.validation import check_output_length
from smg_trio.wire import openai as oa
from smg_trio.wire.openai_decode import requested_generate_constraint

# Importable from here too, where callers have always found them.
__all__ = [
    "PromptModel",
    "chat_prompt",
    "chat_prompt_ids",
    "checked_prompt_ids",
    "prepare_chat",
    "prepare_chat_completion",
    "prepare_completion",
    "prepare_generate",
    "stop_spec_for",
]


def prepare_chat_completion(
    req: oa.ChatCompletionRequest,
    model: PromptModel,
    *,
    request_id: str,
    now: _dt.datetime,
    images: Sequence[ProcessedImage] = (),
) -> GeneratePlan:
    """/v1/chat/completions: vLLM's bound on `max_completion_tokens` (else `max_tokens`) before
    anything is tokenized, then `prepare_chat` (which Messages and Responses share; they cap)."""
    param = "max_tokens" if req.max_completion_tokens is None else "max_completion_tokens"
    check_output_length(req.max_new_tokens, param, model.context_length)
    return prepare_chat(req, model, request_id=request_id, now=now, images=images)


def prepare_chat(
    req: oa.ChatCompletionRequest,
    model: PromptModel,
    *,
    request_id: str,
    now: _dt.datetime,
    images: Sequence[ProcessedImage] = (),
) -> GeneratePlan:
    """`images`: the request's image parts processed, in order (`chat_image_refs`)."""
    req = templated_request(req, model.frontend)
    limit = model.prompt_limit(req.truncate_prompt_tokens, "messages")
    refs = chat_image_refs(req)
    if refs and req.truncate_prompt_tokens is not None:
        raise ClientError(
            "truncate_prompt_tokens cannot cut a prompt holding images",
            param="truncate_prompt_tokens",
        )
    prompt_ids, media = chat_prompt(req, model, now=now, limit=limit, images=images)
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    role = response_role(req, model.frontend.response_role)
    plan = sampled_plan(
        req,
        model,
        endpoint=Endpoint.CHAT,
        request_id=request_id,
        prompt_ids=prompt_ids,
        prompt_param="messages",
        max_tokens=req.max_new_tokens,
        logprobs=logprobs,
        echo_text=_echoed_message(req, role) if req.echo else None,
    )
    plan = msgspec.structs.replace(plan, response_role=role)
    if media:
        plan = msgspec.structs.replace(
            plan, media=media, media_params=tuple(ref.param for ref in refs)
        )
    plan = with_parsers(
        plan, req, model.tool_call_parser, model.reasoning_parser, model.named_special_ids
    )
    plan = with_harmony_stops(plan, model.harmony_stop_ids)
    prompt_logprobs = req.prompt_logprobs
    param: str | None = "prompt_logprobs"
    if prompt_logprobs is None and req.echo and not req.stream:
        # vLLM's chat echo asks for prompt logprobs at top_logprobs (default 0) and returns them
        # in a full response; a runtime without them still echoes (finalize drops them).
        prompt_logprobs, param = req.top_logprobs or 0, None
    if prompt_logprobs is None:
        return plan
    sampling = msgspec.structs.replace(plan.sampling, prompt_logprobs=prompt_logprobs)
    return msgspec.structs.replace(plan, sampling=sampling, prompt_logprobs_param=param)


def response_role(req: oa.ChatCompletionRequest, server_role: str) -> str:
    """The reply's role, as vLLM's server names it: the server's (`--response-role`) after a
    generation prompt, else the last message's (the model continues it)."""
    if req.add_generation_prompt:
        return server_role
    return message_role(req.messages[-1])


def message_role(message: oa.ChatMessage) -> str:
    return str(message.__struct_config__.tag)  # every message struct is tagged by its role


def _echoed_message(req: oa.ChatCompletionRequest, role: str) -> str | None:
    """Chat `echo` (vLLM): the last message's text is prefixed to the output when that message
    speaks in the response's `role` (the assistant's, by default, with a generation prompt; any
    role without one, since the reply then speaks as the last message)."""
    last = req.messages[-1]
    if message_role(last) != role:
        return None
    if last.content is None:
        return None
    if isinstance(last.content, str):
        return last.content or None
    text = "\n".join(part.text for part in last.content if isinstance(part, oa.TextPart))
    return text or None


def prepare_completion(
    req: oa.CompletionRequest, model: PromptModel, *, request_id: str
) -> GeneratePlan:
    check_output_length(req.max_tokens, "max_tokens", model.context_length)  # vLLM's, first
    limit = model.prompt_limit(req.truncate_prompt_tokens, "prompt")
    parts = tuple(
        msgspec.structs.replace(
            part, ids=truncated(part.ids, req.truncate_prompt_tokens, model.context_length)
        )
        for part in (
            _completion_prompt(p, bool(req.echo), model, limit) for p in _prompt_list(req.prompt)
        )
    )
    # Echo with max_tokens 0 asks the engine for one token, as vLLM does (see GeneratePlan).
    echo_only = bool(req.echo) and req.max_tokens == 0
    max_tokens = 1 if echo_only else req.max_tokens
    for part in parts:  # each prompt of a batch must fit the context on its own
        room_capped_max_tokens(len(part.ids), max_tokens, model, "prompt")
    # The longest prompt leaves the least room: an unset max_tokens is the room it leaves.
    longest = max(parts, key=lambda part: len(part.ids))
    plan = sampled_plan(
        req,
        model,
        endpoint=Endpoint.COMPLETION,
        request_id=request_id,
        prompt_ids=longest.ids,
        prompt_param="prompt",
        max_tokens=max_tokens,
        logprobs=req.logprobs,
        echo_text=longest.echo_text,
    )
    first = parts[0]
    # vLLM: `echo` with `logprobs` asks for the prompt's logprobs at the same width.
    prompt_logprobs = req.prompt_logprobs
    param = "prompt_logprobs"
    if prompt_logprobs is None and req.echo and req.logprobs is not None:
        prompt_logprobs, param = req.logprobs, "echo"
    return msgspec.structs.replace(
        plan,
        prompt_ids=first.ids,
        echo_text=first.echo_text,
        batch_prompts=parts if len(parts) > 1 else (),
        sampling=msgspec.structs.replace(plan.sampling, prompt_logprobs=prompt_logprobs),
        prompt_logprobs_param=param,
        echo_only=echo_only,
    )


def _prompt_list(prompt: str | tuple[str | int | tuple[int, ...], ...]) -> list[str | list[int]]:
    """A completions `prompt` as its prompts: a string, a token id list, or a list of either."""
    if isinstance(prompt, str):
        return [prompt]
    if all(isinstance(p, int) for p in prompt):
        return [[p for p in prompt if isinstance(p, int)]]
    return [p if isinstance(p, str) else list(p) for p in prompt if not isinstance(p, int)]


def _completion_prompt(
    prompt: str | list[int], echo: bool, model: PromptModel, limit: PromptLimit | None
) -> PromptPart:
    if isinstance(prompt, str):
        ids = bounded_encode(model.tokenizer, prompt, add_special_tokens=True, limit=limit)
        return PromptPart(ids=ids, echo_text=prompt if echo else None)
    ids = checked_prompt_ids(prompt, model.vocab_size, "prompt")
    text = model.tokenizer.decode(ids, skip_special_tokens=False) if echo else None
    return PromptPart(ids=ids, echo_text=text)


def prepare_generate(
    req: oa.GenerateRequest, model: PromptModel, *, request_id: str
) -> GeneratePlan:
    params = req.sampling_params
    if req.input_ids is not None:
        prompt_ids = checked_prompt_ids(req.input_ids, model.vocab_size, "input_ids")
        param = "input_ids"
    else:
        limit = model.prompt_limit(None, "text")
        text = req.text or ""
        prompt_ids = bounded_encode(model.tokenizer, text, add_special_tokens=True, limit=limit)
        param = "text"
    sampling = SamplingParams(
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k,
        min_p=params.min_p,
        presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty,
        repetition_penalty=params.repetition_penalty,
        seed=params.effective_seed,
        max_tokens=room_capped_max_tokens(len(prompt_ids), params.max_new_tokens, model, param),
        min_tokens=params.min_new_tokens,
        logprobs=req.top_logprobs_num if req.return_logprob else None,
        ignore_eos=params.ignore_eos,
        skip_special_tokens=params.skip_special_tokens,
        no_stop_trim=params.no_stop_trim,
        stop=params.stop_strings,
        stop_token_ids=tuple(params.stop_token_ids or ()),
        constraint=requested_generate_constraint(params),
    )
    return GeneratePlan(
        request_id=request_id,
        endpoint=Endpoint.GENERATE,
        model=req.model or model.name,
        prompt_ids=prompt_ids,
        sampling=sampling,
        n=params.n,
        stream=req.stream,
        include_usage=False,
        stop_spec=stop_spec_for(sampling, model.tokenizer, model.eos_token_id),
        logprob_text=req.return_text_in_logprobs,
        stream_interval=model.stream_interval,
    )
