"""Pure. Decoding and validating client request bodies, like OpenAI/vLLM validate them.

Bodies decode with msgspec (unknown fields ignored, as vLLM/SGLang servers do) and are then
checked: here, which fields may combine and what shape they take; the value rules (ranges,
limits) are `neutral.validation`'s, applied to each field as the client spelled it. Every
rejection is a 400 `ClientError` whose `param` names the offending field; a body nesting deeper
than `json_depth.MAX_JSON_DEPTH` is refused before decoding (docs/limits.md §3).

Decoding is lax the way vLLM's pydantic models are (`strict=False`): an integral float such as
`"max_tokens": 16.0` is the integer 16, a non-integral one is a 400. Which known fields a
request may carry without a parser or engine support is docs/request-fields.md's table.
"""

from __future__ import annotations

from typing import Any

import msgspec

from smg_trio.errors import ClientError
from smg_trio.neutral.sampling import ConstraintKind, StructuredConstraint
from smg_trio.neutral.validation import (
    INT64_MAX,
    INT64_MIN,
    MAX_BAD_WORDS,
    MAX_BATCH_PROMPTS,
    MAX_CHOICES,
    MAX_COMPLETION_LOGPROBS,
    MAX_GENERATE_STOP_STRINGS,
    MAX_MESSAGES,
    MAX_PROMPT_TOKEN_IDS,
    MAX_STOP_STRINGS,
    MAX_TOOLS,
    MAX_TOP_LOGPROBS,
    check_at_least,
    check_between,
    check_count,
    check_knobs,
    check_lengths,
    check_stops,
    check_truncate_prompt_tokens,
    checked_allowed_token_ids,
    checked_constraint,
    checked_logit_bias,
)
from smg_trio.wire.decode_errors import decode_body, read_decode_error
from smg_trio.wire.openai import (
    ChatCompletionRequest,
    CompletionRequest,
    GenerateRequest,
    GenerateSamplingParams,
    JsonObjectFormat,
    JsonSchemaFormat,
    StructuredOutputs,
    _SamplingFields,
)


def _decode_error(exc: msgspec.DecodeError) -> ClientError:
    """msgspec's error → 400 naming the parameter (`$.messages[0].role` → `messages[0].role`)."""
    failure = read_decode_error(exc)
    if not failure.valid_json:
        return ClientError(f"The request body is not valid JSON: {failure.message}")
    return ClientError(f"Invalid request: {failure.message}", param=failure.path or None)


def _reject(param: str, message: str) -> ClientError:
    return ClientError(message, param=param)


def _check_openai_common(req: _SamplingFields, max_tokens: int | None, max_param: str) -> None:
    check_knobs(req, "")
    check_between(req.n, "n", 1, MAX_CHOICES)
    check_between(req.seed, "seed", INT64_MIN, INT64_MAX)
    check_between(req.stream_interval, "stream_interval", 1, INT64_MAX)
    check_lengths(max_tokens, max_param, req.min_tokens, "min_tokens")
    check_stops(req.stop, "stop", max_count=MAX_STOP_STRINGS)
    check_count(req.bad_words, "bad_words", MAX_BAD_WORDS)
    if req.stream_options is not None and not req.stream:
        raise _reject("stream_options", "stream_options is only allowed when stream is true")
    checked_logit_bias(req.logit_bias, "logit_bias", None)
    checked_allowed_token_ids(req.allowed_token_ids, "allowed_token_ids", None)
    check_truncate_prompt_tokens(req.truncate_prompt_tokens, "truncate_prompt_tokens")
    requested_constraint(req)
    check_between(req.prompt_logprobs, "prompt_logprobs", 0, MAX_COMPLETION_LOGPROBS)
    if req.prompt_logprobs is not None and req.stream:
        # vLLM's rule (its -1, the whole vocabulary, is refused by the range check above).
        raise _reject("prompt_logprobs", "prompt_logprobs are not available when stream is true")


def requested_constraint(req: _SamplingFields) -> StructuredConstraint | None:
    """The one structured-output constraint of `req`, whichever field carried it (or None)."""
    found: list[StructuredConstraint] = []
    fmt = req.response_format
    if isinstance(fmt, JsonObjectFormat):
        found.append(StructuredConstraint(kind=ConstraintKind.JSON_OBJECT, param="response_format"))
    elif isinstance(fmt, JsonSchemaFormat):
        schema = fmt.json_schema.json_schema
        param = "response_format.json_schema.schema"
        if schema is None:
            raise _reject(param, "response_format json_schema needs a schema")
        found.append(_json_schema(schema, param))
    if req.structured_outputs is not None:
        found.extend(_structured_outputs(req.structured_outputs))
    if req.guided_json is not None:
        found.append(_json_schema(req.guided_json, "guided_json"))
    if req.guided_regex is not None:
        found.append(_text(ConstraintKind.REGEX, req.guided_regex, "guided_regex"))
    if req.guided_choice is not None:
        found.append(_choice(req.guided_choice, "guided_choice"))
    if req.guided_grammar is not None:
        found.append(_text(ConstraintKind.GRAMMAR, req.guided_grammar, "guided_grammar"))
    return checked_constraint(found)


def requested_generate_constraint(sp: GenerateSamplingParams) -> StructuredConstraint | None:
    """/generate's one constraint: SGLang's `json_schema` (text), `regex` or `ebnf`."""
    prefix = "sampling_params."
    if sp.structural_tag is not None:
        raise _reject(prefix + "structural_tag", "structural_tag is not supported")
    found: list[StructuredConstraint] = []
    if sp.json_schema is not None:
        found.append(_json_schema(sp.json_schema, prefix + "json_schema"))
    if sp.regex is not None:
        found.append(_text(ConstraintKind.REGEX, sp.regex, prefix + "regex"))
    if sp.ebnf is not None:
        found.append(_text(ConstraintKind.GRAMMAR, sp.ebnf, prefix + "ebnf"))
    return checked_constraint(found)


def _structured_outputs(so: StructuredOutputs) -> list[StructuredConstraint]:
    prefix = "structured_outputs."
    if so.structural_tag is not None:
        raise _reject(prefix + "structural_tag", "structural_tag is not supported")
    options = {
        "disable_fallback": so.disable_fallback,
        "disable_any_whitespace": so.disable_any_whitespace,
        "disable_additional_properties": so.disable_additional_properties,
        "whitespace_pattern": so.whitespace_pattern is not None,
    }
    for name, given in options.items():
        if given:
            raise _reject(prefix + name, f"structured_outputs.{name} is not supported")
    found: list[StructuredConstraint] = []
    if so.json is not None:
        found.append(_json_schema(so.json, prefix + "json"))
    if so.regex is not None:
        found.append(_text(ConstraintKind.REGEX, so.regex, prefix + "regex"))
    if so.choice is not None:
        found.append(_choice(so.choice, prefix + "choice"))
    if so.grammar is not None:
        found.append(_text(ConstraintKind.GRAMMAR, so.grammar, prefix + "grammar"))
    if so.json_object is not None:
        if not so.json_object:  # vLLM's rule: omit structured_outputs instead
            raise _reject(prefix + "json_object", "structured_outputs.json_object must be true")
        found.append(
            StructuredConstraint(kind=ConstraintKind.JSON_OBJECT, param=prefix + "json_object")
        )
    if not found:
        raise _reject("structured_outputs", "structured_outputs needs one constraint")
    return found


def _json_schema(schema: str | dict[str, Any], param: str) -> StructuredConstraint:
    # A dict is serialized once, compactly; a string is passed as the client wrote it.
    text = schema if isinstance(schema, str) else msgspec.json.encode(schema).decode()
    return StructuredConstraint(kind=ConstraintKind.JSON_SCHEMA, param=param, text=text)


def _text(kind: ConstraintKind, text: str, param: str) -> StructuredConstraint:
    return StructuredConstraint(kind=kind, param=param, text=text)


def _choice(choices: tuple[str, ...], param: str) -> StructuredConstraint:
    return StructuredConstraint(kind=ConstraintKind.CHOICE, param=param, choices=choices)


def validate_chat(req: ChatCompletionRequest) -> None:
    if not req.messages:
        raise _reject("messages", "messages must contain at least one message")
    check_count(req.messages, "messages", MAX_MESSAGES)
    check_count(req.tools, "tools", MAX_TOOLS)
    check_at_least(req.max_tokens, "max_tokens", 1)
    max_param = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    _check_openai_common(req, req.max_new_tokens, max_param)
    if req.top_logprobs is not None:
        check_between(req.top_logprobs, "top_logprobs", 0, MAX_TOP_LOGPROBS)
        if not req.logprobs:
            raise _reject("top_logprobs", "top_logprobs requires logprobs to be true")
    # tool_choice depends on the configured parsers: core/tool_choice.py decides it.
    if req.continue_final_message and req.add_generation_prompt:
        raise _reject(
            "continue_final_message",
            "continue_final_message and add_generation_prompt cannot both be true",
        )


def validate_completion(req: CompletionRequest) -> None:
    prompt = req.prompt
    if not isinstance(prompt, str):
        if not prompt:
            raise _reject("prompt", "prompt must not be empty")
        kinds = {type(p) for p in prompt}
        if len(kinds) != 1:
            raise _reject("prompt", "prompt must be a string, strings, token ids or token id lists")
        # A list of strings or of token id lists is a batch: one choice set per prompt.
        id_lists: list[tuple[int, ...]] = (
            [tuple(p for p in prompt if isinstance(p, int))]
            if kinds == {int}
            else [p for p in prompt if isinstance(p, tuple)]
        )
        if kinds != {int}:
            check_count(prompt, "prompt", MAX_BATCH_PROMPTS)
        for ids in id_lists:
            check_count(ids, "prompt", MAX_PROMPT_TOKEN_IDS)
        if any(not ids or any(t < 0 for t in ids) for ids in id_lists):
            raise _reject("prompt", "prompt token ids must be non-empty and non-negative")
    # `echo` with max_tokens 0 scores the prompt alone (vLLM generates one token and drops it).
    echo_only = bool(req.echo) and req.max_tokens == 0
    _check_openai_common(req, 1 if echo_only else req.max_tokens, "max_tokens")
    check_between(req.logprobs, "logprobs", 0, MAX_COMPLETION_LOGPROBS)
    if req.suffix is not None:
        raise _reject("suffix", "suffix is not supported: no engine behind this gateway fills in")
    if req.best_of is not None and req.best_of != req.num_choices:
        raise _reject("best_of", "best_of is not supported unless it equals n")


def validate_generate(req: GenerateRequest) -> None:
    if (req.text is None) == (req.input_ids is None):
        raise _reject("text", "exactly one of text and input_ids must be given")
    check_count(req.input_ids, "input_ids", MAX_PROMPT_TOKEN_IDS)
    if req.input_ids is not None and (not req.input_ids or any(t < 0 for t in req.input_ids)):
        raise _reject("input_ids", "input_ids must be non-empty and non-negative")
    sp = req.sampling_params
    check_knobs(sp, "sampling_params.")
    check_between(sp.n, "sampling_params.n", 1, MAX_CHOICES)
    check_between(sp.effective_seed, "sampling_params.seed", INT64_MIN, INT64_MAX)
    check_lengths(
        sp.max_new_tokens,
        "sampling_params.max_new_tokens",
        sp.min_new_tokens,
        "sampling_params.min_new_tokens",
    )
    # SGLang sets no limit on the number of stop strings; ours keeps the stop scan per chunk
    # cheap (docs/request-fields.md §6). Empty ones would match at once.
    check_stops(sp.stop, "sampling_params.stop", max_count=MAX_GENERATE_STOP_STRINGS)
    requested_generate_constraint(sp)
    check_between(req.top_logprobs_num, "top_logprobs_num", 0, MAX_TOP_LOGPROBS)
    if req.logprob_start_len not in (None, -1):
        # SGLang's input (prompt) logprobs: no /generate path here returns them.
        raise _reject("logprob_start_len", "input logprobs (logprob_start_len) are not supported")


# Lax like vLLM's pydantic models: integral floats are ints ("max_tokens": 16.0).
_CHAT_DECODER = msgspec.json.Decoder(ChatCompletionRequest, strict=False)
_COMPLETION_DECODER = msgspec.json.Decoder(CompletionRequest, strict=False)
_GENERATE_DECODER = msgspec.json.Decoder(GenerateRequest, strict=False)


def decode_chat_request(body: bytes) -> ChatCompletionRequest:
    """JSON body → validated request; any problem is a 400 `ClientError` naming the param."""
    req = decode_body(_CHAT_DECODER, body, _decode_error)
    validate_chat(req)
    return req


def decode_completion_request(body: bytes) -> CompletionRequest:
    req = decode_body(_COMPLETION_DECODER, body, _decode_error)
    validate_completion(req)
    return req


def decode_generate_request(body: bytes) -> GenerateRequest:
    req = decode_body(_GENERATE_DECODER, body, _decode_error)
    validate_generate(req)
    return req
