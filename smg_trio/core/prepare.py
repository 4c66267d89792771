"""Pure. Client request → GeneratePlan: template, tokenize, map sampling, build the stop spec.

What runs here is everything the gateway decides before it knows which worker will serve the
request. Tokenization follows transformers: a chat prompt is rendered by the template (which
writes any BOS itself) and encoded WITHOUT adding special tokens again; a completion prompt is
encoded WITH them (the tokenizer's post-processor decides what that means). Prompt token ids
given by the client are checked against the vocabulary; they are never re-tokenized.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence

import msgspec

from smg_trio.core.chat_template import ChatTemplate, cut_after_final_message, template_messages
from smg_trio.core.harmony_prompt import harmony_chat_text, with_harmony_stops
from smg_trio.core.images import (
    ProcessedImage,
    chat_image_refs,
    expand_placeholders,
    place_images,
)
from smg_trio.core.plan import GeneratePlan, PromptPart, StopSpec
from smg_trio.core.prompt_bound import PromptLimit, bounded_encode, kept_tokens, truncated
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.core.tool_choice import with_parsers
from smg_trio.errors import ClientError
from smg_trio.neutral.media import MediaFeature
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.neutral.validation import (
    check_context_length,
    check_output_length,
    checked_allowed_token_ids,
    checked_logit_bias,
)
from smg_trio.wire import openai as oa
from smg_trio.wire.openai_decode import requested_constraint, requested_generate_constraint


class PromptModel(msgspec.Struct, frozen=True, kw_only=True):
    """The parts of a model that preparing a request needs; built once at startup."""

    name: str
    tokenizer: TokenizerLike
    chat_template: ChatTemplate | None
    vocab_size: int
    context_length: int | None = None
    eos_token_id: int | None = None  # the primary EOS (config.json's first)
    tool_call_parser: str | None = None  # --tool-call-parser, --reasoning-parser
    reasoning_parser: str | None = None
    # The most input bytes one token stands for (None: unbounded), for prompt_bound's byte rule.
    max_bytes_per_token: int | None = None
    harmony_stop_ids: tuple[int, ...] = ()  # gpt-oss: <|return|>, <|call|> (harmony_prompt.py)
    stream_interval: int = 1  # --stream-interval (docs/performance.md §4)

    def prompt_limit(self, truncate_prompt_tokens: int | None, param: str) -> PromptLimit | None:
        """What bounds a prompt's tokenization (docs/limits.md §1); None without a context."""
        if self.context_length is None:
            return None
        return PromptLimit(
            context_length=self.context_length,
            max_bytes_per_token=self.max_bytes_per_token,
            keep=kept_tokens(truncate_prompt_tokens, self.context_length),
            param=param,
        )


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
    limit = model.prompt_limit(req.truncate_prompt_tokens, "messages")
    refs = chat_image_refs(req)
    if refs and req.truncate_prompt_tokens is not None:
        raise ClientError(
            "truncate_prompt_tokens cannot cut a prompt holding images",
            param="truncate_prompt_tokens",
        )
    prompt_ids, media = chat_prompt(req, model, now=now, limit=limit, images=images)
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    plan = _plan(
        req,
        model,
        endpoint=Endpoint.CHAT,
        request_id=request_id,
        prompt_ids=prompt_ids,
        prompt_param="messages",
        max_tokens=req.max_new_tokens,
        logprobs=logprobs,
        echo_text=_echoed_message(req) if req.echo else None,
    )
    if media:
        plan = msgspec.structs.replace(
            plan, media=media, media_params=tuple(ref.param for ref in refs)
        )
    plan = with_parsers(plan, req, model.tool_call_parser, model.reasoning_parser)
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


def chat_prompt_ids(
    req: oa.ChatCompletionRequest,
    model: PromptModel,
    *,
    now: _dt.datetime,
    add_special_tokens: bool = False,
    limit: PromptLimit | None = None,
) -> tuple[int, ...]:
    """The prompt ids of a chat request without images (`chat_prompt`)."""
    ids, _ = chat_prompt(
        req, model, now=now, add_special_tokens=add_special_tokens, limit=limit, images=()
    )
    return ids


def chat_prompt(
    req: oa.ChatCompletionRequest,
    model: PromptModel,
    *,
    now: _dt.datetime,
    add_special_tokens: bool = False,
    limit: PromptLimit | None = None,
    images: Sequence[ProcessedImage] = (),
) -> tuple[tuple[int, ...], tuple[MediaFeature, ...]]:
    """The prompt ids of a chat request: its messages templated, then encoded; with its
    images' placeholders expanded first and their spans located after (core/images.py).

    The one place chat prompts are built: `prepare_chat` sends these to the engine and
    /v1/tokenize returns them (`add_special_tokens` is tokenize's option; chat never adds).
    `limit` bounds the encoding (prompt_bound); /v1/tokenize, like vLLM's, has none. An
    image part without its processed image is a 400 naming it (where images are not taken).
    """
    refs = chat_image_refs(req)
    if len(refs) != len(images):
        param = refs[0].param if refs else "messages"
        raise ClientError(
            f"{param}: images are not taken on this path",
            code="multimodal_not_supported",
            param=param,
        )
    if not images:
        return _chat_text_ids(req, model, now, add_special_tokens, limit), ()
    if model.harmony_stop_ids:
        raise ClientError(
            f"{refs[0].param}: gpt-oss takes text only",
            code="multimodal_not_supported",
            param=refs[0].param,
        )
    text = expand_placeholders(
        _chat_text(req, model, now), images[0].placeholder, images, "messages"
    )
    ids = bounded_encode(model.tokenizer, text, add_special_tokens=add_special_tokens, limit=limit)
    return ids, place_images(ids, images, model.tokenizer, "messages")


def _chat_text_ids(
    req: oa.ChatCompletionRequest,
    model: PromptModel,
    now: _dt.datetime,
    add_special_tokens: bool,
    limit: PromptLimit | None,
) -> tuple[int, ...]:
    if model.harmony_stop_ids:  # gpt-oss: Harmony instead of the chat template
        text = harmony_chat_text(req, template_messages(req, developer_role=True), now=now)
        return bounded_encode(
            model.tokenizer, text, add_special_tokens=add_special_tokens, limit=limit
        )
    text = _chat_text(req, model, now)
    return bounded_encode(model.tokenizer, text, add_special_tokens=add_special_tokens, limit=limit)


def _chat_text(req: oa.ChatCompletionRequest, model: PromptModel, now: _dt.datetime) -> str:
    """The chat template's rendering of `req` (continue_final_message applied)."""
    if model.chat_template is None:
        raise ClientError(
            f"model {model.name!r} has no chat template; use /v1/completions", param="messages"
        )
    template = model.chat_template
    messages = template_messages(req, developer_role=template.has_developer_role)
    tools = [msgspec.to_builtins(t) for t in req.tools] if req.tools else None
    extra = dict(req.chat_template_kwargs or {})
    if req.reasoning_effort is not None:
        # vLLM hands reasoning_effort to the template (request-fields.md §3); the client's own
        # chat_template_kwargs win.
        extra.setdefault("reasoning_effort", req.reasoning_effort)
    text = template.render(
        messages,
        add_generation_prompt=req.add_generation_prompt,
        now=now,
        tools=tools,
        extra=extra or None,
    )
    if req.continue_final_message:
        text = cut_after_final_message(text, messages[-1])
    return text


def _echoed_message(req: oa.ChatCompletionRequest) -> str | None:
    """Chat `echo` (vLLM): the last message's text is prefixed to the output when that message
    speaks in the response's role: the assistant's with a generation prompt, any role without
    one (vLLM then answers in the last message's role)."""
    last = req.messages[-1]
    if req.add_generation_prompt and not isinstance(last, oa.AssistantMessage):
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
        _max_tokens(len(part.ids), max_tokens, model, "prompt")
    # The longest prompt leaves the least room: an unset max_tokens is the room it leaves.
    longest = max(parts, key=lambda part: len(part.ids))
    plan = _plan(
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
        max_tokens=_max_tokens(len(prompt_ids), params.max_new_tokens, model, param),
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


def _plan(
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
    max_tokens = _max_tokens(len(prompt_ids), max_tokens, model, prompt_param)
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
    return GeneratePlan(
        request_id=request_id,
        endpoint=endpoint,
        model=req.model or model.name,
        prompt_ids=prompt_ids,
        sampling=sampling,
        n=req.num_choices,
        stream=req.is_stream,
        include_usage=req.include_usage,
        continuous_usage=req.continuous_usage,
        echo_text=echo_text,
        stop_spec=stop_spec_for(sampling, model.tokenizer, model.eos_token_id),
        # vLLM's rule: a request's stream_interval can only raise the server's.
        stream_interval=max(req.stream_interval or 1, model.stream_interval),
        return_token_ids=bool(req.return_token_ids),
    )


def _max_tokens(
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
