"""The client-facing JSON: what we accept, what we reject (and which param we blame), and that
the openai SDK itself parses what we send back."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import msgspec
import openai
import pytest

from smg_trio.errors import ClientError, EngineDead, EngineRejected
from smg_trio.neutral.sampling import ConstraintKind
from smg_trio.neutral.validation import check_context_length
from smg_trio.wire.openai import (
    AssistantMessage,
    DeveloperMessage,
    ImagePart,
    JsonSchemaFormat,
    SystemMessage,
    TextPart,
    ToolMessage,
    UserMessage,
)
from smg_trio.wire.openai_decode import (
    decode_chat_request,
    decode_completion_request,
    decode_generate_request,
    requested_constraint,
    requested_generate_constraint,
)
from smg_trio.wire.openai_responses import (
    JSON_ENCODER,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChoiceDelta,
    ChunkChoice,
    Completion,
    CompletionChoice,
    ModelCard,
    ModelList,
    ResponseMessage,
    Usage,
    error_body,
)

USER = {"role": "user", "content": "hi"}


def chat(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "messages": [USER], **fields}).encode()


def completion(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "prompt": "once upon", **fields}).encode()


def generate(**fields: Any) -> bytes:
    return json.dumps({"text": "once upon", **fields}).encode()


def rejected(decode: Any, body: bytes) -> ClientError:
    with pytest.raises(ClientError) as info:
        decode(body)
    assert info.value.status == 400
    assert info.value.error_type == "invalid_request_error"
    return info.value


# --- decoding -------------------------------------------------------------------------------


def test_full_chat_request_decodes_every_role_and_structural_field() -> None:
    body = chat(
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": [{"type": "text", "text": "dev"}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                ],
                "name": "ann",
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "content": "42", "tool_call_id": "c1"},
        ],
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        tool_choice="none",
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": {}}},
        stream=True,
        stream_options={"include_usage": True},
        stop=["\n", "END"],
        max_completion_tokens=10,
        logprobs=True,
        top_logprobs=3,
        top_k=40,
        chat_template_kwargs={"enable_thinking": False},
    )
    req = decode_chat_request(body)
    roles = [type(m) for m in req.messages]
    assert roles == [SystemMessage, DeveloperMessage, UserMessage, AssistantMessage, ToolMessage]
    user = req.messages[2]
    assert isinstance(user, UserMessage)
    assert isinstance(user.content, tuple)
    assert isinstance(user.content[0], TextPart)
    assert isinstance(user.content[1], ImagePart)
    assert req.tool_choice == "none"
    assert isinstance(req.response_format, JsonSchemaFormat)
    assert req.response_format.json_schema.json_schema == {}
    assert req.include_usage
    assert req.is_stream
    assert req.stop_strings == ("\n", "END")
    assert req.max_new_tokens == 10
    assert req.num_choices == 1


def test_unknown_fields_are_ignored_at_every_level() -> None:
    body = chat(
        messages=[{"role": "user", "content": "hi", "cache_control": {"type": "x"}}],
        store=True,
        metadata={"k": "v"},
        stream_options=None,
        some_vendor_knob=[1, 2],
    )
    req = decode_chat_request(body)
    assert req.messages == (UserMessage(content="hi"),)


def test_model_may_be_omitted_like_vllm() -> None:
    assert decode_chat_request(json.dumps({"messages": [USER]}).encode()).model is None


def test_nulls_mean_not_given() -> None:
    req = decode_chat_request(chat(n=None, stream=None, stop=None, temperature=None))
    assert (req.num_choices, req.is_stream, req.stop_strings, req.temperature) == (
        1,
        False,
        (),
        None,
    )


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        (b"{not json", None, "not valid JSON"),
        (b"", None, "not valid JSON"),
        (b"[]", None, "Expected `object`"),
        (json.dumps({"model": "m"}).encode(), "messages", "missing required field"),
        (chat(max_tokens=10.5), "max_tokens", "Expected `int | null`"),
        (chat(messages=[{"role": "function", "content": "x"}]), "messages[0].role", "function"),
        (chat(messages=[{"role": "user"}]), "messages[0].content", "missing required field"),
        (
            chat(messages=[{"role": "user", "content": [{"type": "video", "url": "x"}]}]),
            "messages[0].content[0].type",
            "video",
        ),
        (chat(messages=[{"role": "tool", "content": "x"}]), "messages[0].tool_call_id", "missing"),
        (chat(stream="yes"), "stream", "Expected"),
        (chat(tool_choice="sometimes"), "tool_choice", "Invalid"),
    ],
)
def test_malformed_bodies_are_400s_naming_the_param(
    body: bytes, param: str | None, fragment: str
) -> None:
    err = rejected(decode_chat_request, body)
    assert err.param == param
    assert fragment in err.message


# --- semantic validation: chat ----------------------------------------------------------------

CHAT_REJECTED = [
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": 2.01}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": -2}, "top_k"),
    ({"min_p": 1.1}, "min_p"),
    ({"min_p": -0.1}, "min_p"),
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": -2.5}, "frequency_penalty"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"n": 0}, "n"),
    ({"n": 129}, "n"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ({"max_tokens": 5, "min_tokens": 6}, "min_tokens"),
    ({"max_completion_tokens": 5, "max_tokens": 50, "min_tokens": 6}, "min_tokens"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"stop": [""]}, "stop"),
    ({"stop": ["a", ""]}, "stop"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": False, "top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ({"prompt_logprobs": 21}, "prompt_logprobs"),  # vLLM max_logprobs (20)
    ({"prompt_logprobs": -1}, "prompt_logprobs"),  # the whole vocabulary: over that limit
    ({"prompt_logprobs": 0, "stream": True}, "prompt_logprobs"),  # vLLM: not when streaming
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": False, "stream_options": {"include_usage": True}}, "stream_options"),
    ({"messages": []}, "messages"),
    ({"seed": 2**63}, "seed"),
    ({"seed": -(2**63) - 1}, "seed"),
    ({"stop_token_ids": [1, -1]}, "stop_token_ids"),
    ({"continue_final_message": True}, "continue_final_message"),
]


@pytest.mark.parametrize(("fields", "param"), CHAT_REJECTED)
def test_chat_rejects_out_of_range_values_naming_the_param(
    fields: dict[str, Any], param: str
) -> None:
    err = rejected(decode_chat_request, chat(**fields))
    assert err.param == param
    assert param in err.message


CHAT_ACCEPTED = [
    {"temperature": 0},
    {"temperature": 2},
    {"top_p": 1},
    {"top_p": 0.01},
    {"top_k": -1},
    {"top_k": 0},
    {"top_k": 50},
    {"min_p": 0},
    {"min_p": 1},
    {"presence_penalty": -2, "frequency_penalty": 2},
    {"repetition_penalty": 0.01},
    {"n": 1},
    {"n": 128},
    {"max_tokens": 1},
    {"max_tokens": 5, "min_tokens": 5},
    {"max_completion_tokens": 50, "max_tokens": 2, "min_tokens": 6},
    {"stop": ["a", "b", "c", "d"]},
    {"stop": ""},
    {"stop": "\n"},
    {"stop": []},
    {"logprobs": True, "top_logprobs": 0},
    {"logprobs": True, "top_logprobs": 20},
    {"prompt_logprobs": 0},
    {"prompt_logprobs": 20},
    {"stream": True, "stream_options": {"include_usage": False}},
    {"seed": 2**63 - 1},
    {"seed": -(2**63)},
    {"stop_token_ids": [0, 2]},
    {"continue_final_message": True, "add_generation_prompt": False},
]


@pytest.mark.parametrize("fields", CHAT_ACCEPTED)
def test_chat_accepts_boundary_values(fields: dict[str, Any]) -> None:
    decode_chat_request(chat(**fields))


def test_stop_empty_string_means_no_stop_and_a_string_is_one_stop() -> None:
    assert decode_chat_request(chat(stop="")).stop_strings == ()
    assert decode_chat_request(chat(stop="\n")).stop_strings == ("\n",)


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    assert decode_chat_request(chat(max_tokens=7)).max_new_tokens == 7
    assert decode_chat_request(chat(max_tokens=7, max_completion_tokens=9)).max_new_tokens == 9
    assert decode_chat_request(chat()).max_new_tokens is None


def test_stop_trim_flags_are_aliases() -> None:
    assert not decode_chat_request(chat()).keep_stop_text
    assert decode_chat_request(chat(no_stop_trim=True)).keep_stop_text
    assert decode_chat_request(chat(include_stop_str_in_output=True)).keep_stop_text


def test_include_usage_needs_stream_and_the_flag() -> None:
    assert not decode_chat_request(chat(stream=True)).include_usage
    body = chat(stream=True, stream_options={"include_usage": True})
    assert decode_chat_request(body).include_usage


# --- completions ---------------------------------------------------------------------------


def single_prompt(request: Any) -> str | tuple[int, ...]:
    """A one-prompt request's prompt as text or token ids, whichever form the body used."""
    prompt = request.prompt
    if isinstance(prompt, str):
        return prompt
    first = prompt[0]
    if isinstance(first, str | tuple):
        return first
    return tuple(p for p in prompt if isinstance(p, int))


@pytest.mark.parametrize(
    ("prompt", "single"),
    [("abc", "abc"), (["abc"], "abc"), ([1, 2, 3], (1, 2, 3)), ([[4, 5]], (4, 5)), ("", "")],
)
def test_completion_prompt_forms(prompt: Any, single: str | tuple[int, ...]) -> None:
    assert single_prompt(decode_completion_request(completion(prompt=prompt))) == single


COMPLETION_REJECTED = [
    ({"prompt": []}, "prompt"),
    ({"prompt": ["a", 1]}, "prompt"),
    ({"prompt": [[1], 2]}, "prompt"),
    ({"prompt": [[]]}, "prompt"),
    ({"prompt": [1, -5]}, "prompt"),
    ({"prompt": [[-1]]}, "prompt"),
    ({"prompt": {"text": "x"}}, "prompt"),
    ({"logprobs": 21}, "logprobs"),  # vLLM max_logprobs (20)
    ({"logprobs": -1}, "logprobs"),
    ({"prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),  # vLLM's rule
    ({"prompt_logprobs": 21}, "prompt_logprobs"),
    ({"max_tokens": 0, "echo": False}, "max_tokens"),  # 0 only scores an echoed prompt
    ({"best_of": 2}, "best_of"),
    ({"n": 2, "best_of": 3}, "best_of"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 3, "min_tokens": 4}, "min_tokens"),
    ({"stop": ["a"] * 5}, "stop"),
    ({"stop": [""]}, "stop"),
    ({"temperature": 3}, "temperature"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
]


@pytest.mark.parametrize(("fields", "param"), COMPLETION_REJECTED)
def test_completion_rejects_naming_the_param(fields: dict[str, Any], param: str) -> None:
    assert rejected(decode_completion_request, completion(**fields)).param == param


@pytest.mark.parametrize(
    "fields",
    [
        {"echo": True, "logprobs": 1, "max_tokens": 0},  # lm-eval-harness's prompt scoring
        {"echo": True, "max_tokens": 0},
        {"echo": True, "logprobs": 20},
        {"prompt_logprobs": 20},
        {"prompt_logprobs": 0, "stream": False},
        {"echo": True, "logprobs": 1, "stream": True},  # the prompt's logprobs in the echo chunk
    ],
)
def test_completion_accepts_prompt_logprobs(fields: dict[str, Any]) -> None:
    decode_completion_request(completion(**fields))


def test_completion_defaults_and_extensions() -> None:
    req = decode_completion_request(completion(echo=True, n=2, best_of=2, ignore_eos=True))
    assert (req.max_tokens, req.echo, req.suffix) == (16, True, None)
    assert decode_completion_request(completion(logprobs=20)).logprobs == 20
    assert (req.num_choices, req.ignore_eos, req.skip_special_tokens) == (2, True, True)
    assert decode_completion_request(completion(max_tokens=None)).max_tokens is None


# --- /generate -----------------------------------------------------------------------------


def test_generate_request_decodes_sglang_fields() -> None:
    req = decode_generate_request(
        generate(
            sampling_params={
                "max_new_tokens": 8,
                "temperature": 0,
                "stop": "\n",
                "stop_token_ids": [2],
                "no_stop_trim": True,
                "sampling_seed": 7,
                "regex": "ignored",
            },
            stream=True,
            rid="r1",
            return_logprob=True,
        )
    )
    sp = req.sampling_params
    assert (sp.max_new_tokens, sp.temperature, sp.stop_strings) == (8, 0.0, ("\n",))
    assert (sp.effective_seed, sp.no_stop_trim, req.rid, req.stream) == (7, True, "r1", True)
    assert decode_generate_request(generate()).sampling_params.max_new_tokens == 128
    ids = decode_generate_request(json.dumps({"input_ids": [1, 2]}).encode())
    assert ids.input_ids == (1, 2)


def test_generate_allows_more_than_four_stops() -> None:
    req = decode_generate_request(generate(sampling_params={"stop": list("abcdef")}))
    assert len(req.sampling_params.stop_strings) == 6


GENERATE_REJECTED = [
    ({"text": None}, "text"),
    ({"input_ids": [1]}, "text"),
    ({"text": None, "input_ids": []}, "input_ids"),
    ({"text": None, "input_ids": [-1]}, "input_ids"),
    ({"text": ["a", "b"]}, "text"),
    ({"sampling_params": {"temperature": 5}}, "sampling_params.temperature"),
    ({"sampling_params": {"top_p": 0}}, "sampling_params.top_p"),
    ({"sampling_params": {"max_new_tokens": 0}}, "sampling_params.max_new_tokens"),
    (
        {"sampling_params": {"max_new_tokens": 2, "min_new_tokens": 3}},
        "sampling_params.min_new_tokens",
    ),
    ({"sampling_params": {"stop": ["a", ""]}}, "sampling_params.stop"),
    ({"sampling_params": {"n": 0}}, "sampling_params.n"),
    ({"sampling_params": {"seed": 2**64}}, "sampling_params.seed"),
    ({"sampling_params": {"stop_token_ids": [-3]}}, "sampling_params.stop_token_ids"),
    ({"sampling_params": {"max_new_tokens": "x"}}, "sampling_params.max_new_tokens"),
    ({"top_logprobs_num": 21}, "top_logprobs_num"),
]


@pytest.mark.parametrize(("fields", "param"), GENERATE_REJECTED)
def test_generate_rejects_naming_the_param(fields: dict[str, Any], param: str) -> None:
    assert rejected(decode_generate_request, generate(**fields)).param == param


# --- context length ------------------------------------------------------------------------


def test_context_length_fits_when_the_prompt_leaves_room() -> None:
    check_context_length(90, 10, 100, "messages")
    check_context_length(99, None, 100, "prompt")
    check_context_length(91, 10, 100, "prompt")  # as vLLM: prepare caps max_tokens to 9


@pytest.mark.parametrize(
    ("prompt_len", "max_tokens", "requested", "completion_part"),
    [(100, 10, 110, "10 in the completion"), (100, None, 100, "0 in the completion")],
)
def test_context_length_overflow_says_what_was_requested(
    prompt_len: int, max_tokens: int | None, requested: int, completion_part: str
) -> None:
    with pytest.raises(ClientError) as info:
        check_context_length(prompt_len, max_tokens, 100, "messages")
    err = info.value
    assert (err.status, err.param, err.code) == (400, "messages", "context_length_exceeded")
    assert "maximum context length is 100 tokens" in err.message
    assert f"you requested {requested} tokens ({prompt_len} in the messages" in err.message
    assert completion_part in err.message


# --- responses and errors --------------------------------------------------------------------


def test_error_body_is_openai_shaped() -> None:
    err = ClientError("bad top_p", param="top_p")
    assert json.loads(error_body(err)) == {
        "error": {
            "message": "bad top_p",
            "type": "invalid_request_error",
            "param": "top_p",
            "code": "invalid_request_parameters",
        }
    }
    backend = json.loads(error_body(EngineRejected("boom")))["error"]
    assert (backend["param"], backend["code"]) == (None, "worker_stream_failed")
    assert "boom" in backend["message"]
    assert (
        json.loads(error_body(EngineDead("gone")))["error"]["type"] == "service_unavailable_error"
    )


def test_chunk_keeps_explicit_nulls_and_omits_unset() -> None:
    chunk = ChatCompletionChunk(
        id="c", created=1, model="m", choices=(ChunkChoice(index=0, delta=ChoiceDelta()),)
    )
    assert JSON_ENCODER.encode(chunk) == (
        b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":null}]}'
    )


def test_openai_sdk_parses_our_responses() -> None:
    chunk = ChatCompletionChunk(
        id="c",
        created=1,
        model="m",
        choices=(
            ChunkChoice(index=0, delta=ChoiceDelta(), finish_reason="stop", matched_stop=151645),
        ),
    )
    parsed_chunk = openai.types.chat.ChatCompletionChunk.model_validate_json(
        JSON_ENCODER.encode(chunk)
    )
    assert parsed_chunk.choices[0].finish_reason == "stop"

    response = ChatCompletion(
        id="c",
        created=1,
        model="m",
        choices=(
            ChatChoice(
                index=0,
                message=ResponseMessage(content=None, reasoning_content="hmm"),
                finish_reason="length",
            ),
        ),
        usage=Usage.of(3, 4),
    )
    parsed = openai.types.chat.ChatCompletion.model_validate_json(JSON_ENCODER.encode(response))
    assert parsed.choices[0].message.content is None
    assert parsed.usage is not None
    assert parsed.usage.total_tokens == 7

    text = Completion(
        id="t",
        created=1,
        model="m",
        choices=(CompletionChoice(text="x", index=0, finish_reason="stop", matched_stop="\n"),),
        usage=Usage.of(1, 1),
    )
    parsed_text = openai.types.Completion.model_validate_json(JSON_ENCODER.encode(text))
    assert parsed_text.choices[0].text == "x"

    models = ModelList(data=(ModelCard(id="m", created=5, max_model_len=4096),))
    decoded = msgspec.json.decode(JSON_ENCODER.encode(models))
    assert decoded["object"] == "list"
    card = openai.types.Model.model_validate(decoded["data"][0])
    assert (card.id, card.owned_by) == ("m", "smg-trio")


def test_openai_sdk_requests_decode_with_our_structs() -> None:
    """The SDK's own request bodies (captured at the transport) decode and validate."""
    seen: list[bytes] = []
    reply = ChatCompletion(
        id="c",
        created=1,
        model="m",
        choices=(
            ChatChoice(index=0, message=ResponseMessage(content="hello"), finish_reason="stop"),
        ),
        usage=Usage.of(1, 1),
    )

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.content)
        return httpx2.Response(200, content=JSON_ENCODER.encode(reply))

    client = openai.OpenAI(
        api_key="x",
        base_url="http://gateway.invalid/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    result = client.chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
        max_completion_tokens=5,
        stop=["\n"],
        seed=3,
        logprobs=True,
        top_logprobs=2,
        extra_body={"top_k": 20, "ignore_eos": True},
    )
    assert result.choices[0].message.content == "hello"
    req = decode_chat_request(seen[0])
    assert (req.max_new_tokens, req.stop_strings, req.seed, req.top_k) == (5, ("\n",), 3, 20)
    assert req.ignore_eos


# --- structured outputs, tools and other known fields (docs/request-fields.md) -----------------


@pytest.mark.parametrize(
    ("fields", "kind", "param"),
    [
        (
            {"response_format": {"type": "json_object"}},
            ConstraintKind.JSON_OBJECT,
            "response_format",
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "s", "schema": {"type": "object"}},
                }
            },
            ConstraintKind.JSON_SCHEMA,
            "response_format.json_schema.schema",
        ),
        ({"structured_outputs": {"regex": "a+"}}, ConstraintKind.REGEX, "structured_outputs.regex"),
        (
            {"structured_outputs": {"choice": ["x"]}},
            ConstraintKind.CHOICE,
            "structured_outputs.choice",
        ),
        (
            {"structured_outputs": {"grammar": 'root ::= "a"'}},
            ConstraintKind.GRAMMAR,
            "structured_outputs.grammar",
        ),
        (
            {"structured_outputs": {"json": '{"type":"object"}'}},
            ConstraintKind.JSON_SCHEMA,
            "structured_outputs.json",
        ),
        ({"guided_json": {"type": "object"}}, ConstraintKind.JSON_SCHEMA, "guided_json"),
        ({"guided_regex": "[0-9]+"}, ConstraintKind.REGEX, "guided_regex"),
        ({"guided_choice": ["a", "b"]}, ConstraintKind.CHOICE, "guided_choice"),
        ({"guided_grammar": 'root ::= "a"'}, ConstraintKind.GRAMMAR, "guided_grammar"),
    ],
)
def test_every_structured_output_spelling_is_one_constraint(
    fields: dict[str, Any], kind: ConstraintKind, param: str
) -> None:
    for decode, body in (
        (decode_chat_request, chat(**fields)),
        (decode_completion_request, completion(**fields)),
    ):
        found = requested_constraint(decode(body))
        assert found is not None
        assert (found.kind, found.param) == (kind, param)


@pytest.mark.parametrize(
    ("sampling", "kind", "param"),
    [
        ({"json_schema": '{"type":"object"}'}, ConstraintKind.JSON_SCHEMA, "json_schema"),
        ({"regex": "[0-9]+"}, ConstraintKind.REGEX, "regex"),
        ({"ebnf": 'root ::= "a"'}, ConstraintKind.GRAMMAR, "ebnf"),
    ],
)
def test_generates_sglang_constraints_are_one_constraint(
    sampling: dict[str, Any], kind: ConstraintKind, param: str
) -> None:
    req = decode_generate_request(generate(sampling_params=sampling))
    found = requested_generate_constraint(req.sampling_params)
    assert found is not None
    assert (found.kind, found.param) == (kind, f"sampling_params.{param}")
    for bad, named in (
        ({"regex": "a", "ebnf": 'root ::= "a"'}, "regex"),
        ({"structural_tag": "{}"}, "structural_tag"),
        ({"json_schema": "[1]"}, "json_schema"),
    ):
        error = rejected(decode_generate_request, generate(sampling_params=bad))
        assert error.param == f"sampling_params.{named}"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_regex"),
        ({"response_format": {"type": "json_object"}, "guided_json": {}}, "response_format"),
        ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs.regex"),
        ({"structured_outputs": {}}, "structured_outputs"),
        (
            {"structured_outputs": {"regex": "a", "disable_fallback": True}},
            "structured_outputs.disable_fallback",
        ),
        ({"guided_json": [1, 2]}, "guided_json"),
        ({"guided_json": "not json"}, "guided_json"),
        ({"guided_regex": "(unclosed"}, "guided_regex"),
        ({"guided_choice": []}, "guided_choice"),
        ({"guided_grammar": " "}, "guided_grammar"),
        # vLLM 0.32's front-end checks (docs/request-fields.md §2).
        ({"structured_outputs": {"regex": "a\x00"}}, "structured_outputs.regex"),
        ({"structured_outputs": {"json_object": False}}, "structured_outputs.json_object"),
        ({"structured_outputs": {"json": ""}}, "structured_outputs.json"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"logit_bias": {"1": 101}}, "logit_bias"),
        ({"allowed_token_ids": []}, "allowed_token_ids"),
        ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
    ],
)
def test_bad_constraints_and_sampling_fields_are_400s_naming_them(
    fields: dict[str, Any], param: str
) -> None:
    assert rejected(decode_chat_request, chat(**fields)).param == param


def test_completion_suffix_is_a_400() -> None:
    assert rejected(decode_completion_request, completion(suffix="!")).param == "suffix"


def test_integral_floats_are_integers_as_in_vllm() -> None:
    assert decode_completion_request(completion(max_tokens=16.0)).max_tokens == 16
    assert rejected(decode_completion_request, completion(max_tokens=16.5)).param == "max_tokens"
