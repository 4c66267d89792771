"""The server's answer options (core/frontend_options.py), as vLLM's flags of the same names shape
its answers: `--response-role` (the reply's role, the role chunk, echo), `--return-tokens-as-
token-ids` (logprob tokens as `token_id:N`, a request's own field winning) and
`--enable-prompt-tokens-details` (usage.prompt_tokens_details always, by endpoint)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Final

import msgspec
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.chat_template import ChatTemplate
from smg_trio.core.frontend_options import FrontendOptions
from smg_trio.core.logprobs import LogprobFormatter
from smg_trio.core.plan import GeneratePlan, StopSpec
from smg_trio.core.prepare import prepare_chat, prepare_completion
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.errors import ClientError
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.events import ChoiceFinished, TokenDelta, TokenLogprob, TopLogprob
from smg_trio.neutral.media import MediaFeature
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.wire.openai_decode import decode_chat_request, decode_completion_request
from smg_trio.wire.openai_responses import JSON_ENCODER
from tests.core.mock_tokenizers import ByteMockTokenizer, WordMockTokenizer

DEMO: Final = load_model_dir(demo_model_path())
NOW: Final = dt.datetime(2026, 12, 8, tzinfo=dt.UTC)
WORDS: Final = WordMockTokenizer()
USER: Final = {"role": "user", "content": "Hi"}
ASSISTANT: Final = {"role": "assistant", "content": "Sure, "}


def chat_plan(frontend: FrontendOptions, **body: Any) -> GeneratePlan:
    model = msgspec.structs.replace(DEMO.prompt_model(), frontend=frontend)
    request = decode_chat_request(json.dumps({"messages": [USER], **body}).encode())
    return prepare_chat(request, model, request_id="r", now=NOW)


def completion_plan(frontend: FrontendOptions, **body: Any) -> GeneratePlan:
    model = msgspec.structs.replace(DEMO.prompt_model(), frontend=frontend)
    request = decode_completion_request(json.dumps({"prompt": "Hi", **body}).encode())
    return prepare_completion(request, model, request_id="r")


def test_the_reply_speaks_in_the_servers_role_after_a_generation_prompt() -> None:
    bot = FrontendOptions(response_role="bot")
    assert chat_plan(FrontendOptions()).response_role == "assistant"
    assert chat_plan(bot).response_role == "bot"
    # vLLM's rule: without a generation prompt the model continues the last message.
    assert chat_plan(bot, add_generation_prompt=False).response_role == "user"
    continued = chat_plan(bot, messages=[USER, ASSISTANT], add_generation_prompt=False)
    assert continued.response_role == "assistant"


def test_echo_takes_the_last_message_only_in_the_replys_role() -> None:
    bot = FrontendOptions(response_role="bot")
    assert chat_plan(FrontendOptions(), messages=[USER, ASSISTANT], echo=True).echo_text == "Sure, "
    # The reply is the bot's: the assistant's last message is not its own, as vLLM compares.
    assert chat_plan(bot, messages=[USER, ASSISTANT], echo=True).echo_text is None
    assert chat_plan(bot, echo=True, add_generation_prompt=False).echo_text == "Hi"


def assembled(plan: GeneratePlan, events: list[Any]) -> tuple[list[dict[str, Any]], Any]:
    a = ResponseAssembler(plan, WORDS, created=1)
    out = a.on_events(events)
    if plan.stream:
        out += a.stream_end().payloads
        return [json.loads(p) for p in out], None
    return [], json.loads(a.response_body())


def plan_of(endpoint: Endpoint = Endpoint.CHAT, **fields: Any) -> GeneratePlan:
    return GeneratePlan(
        request_id="r1",
        endpoint=endpoint,
        model="m",
        prompt_ids=(1, 2, 3),
        sampling=SamplingParams(logprobs=fields.pop("logprobs", None)),
        stop_spec=StopSpec(token_ids=(999,)),
        **fields,
    )


FINISH: Final = ChoiceFinished(0, "length", None, 3, 2, cached_tokens=0)


def test_the_role_chunk_and_the_message_carry_the_role() -> None:
    events = [TokenDelta(0, (1, 2)), FINISH]
    chunks, _ = assembled(plan_of(stream=True, response_role="bot"), events)
    assert chunks[0]["choices"][0]["delta"] == {"role": "bot", "content": ""}
    assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:] if c["choices"])
    _, body = assembled(plan_of(response_role="bot"), events)
    assert body["choices"][0]["message"]["role"] == "bot"
    assert body["choices"][0]["message"]["content"] == "Hello world"


def lp(token_id: int) -> TokenLogprob:
    top = (TopLogprob(3, -0.05), TopLogprob(token_id, -0.5), TopLogprob(4, -2.0))
    return TokenLogprob(token_id=token_id, logprob=-0.5, rank=2, top=top)


def test_chat_logprob_tokens_as_ids_keep_the_sampled_tokens_text_bytes() -> None:
    formatter = LogprobFormatter(WORDS, 2, as_ids=True)
    entry = JSON_ENCODER.encode(formatter.chat([lp(1)]))
    content = json.loads(entry)["content"][0]
    # vLLM: the sampled token's bytes stay its text's; each candidate's are its placeholder's.
    assert content["token"] == "token_id:1"
    assert content["bytes"] == list(WORDS.decode((1,), skip_special_tokens=False).encode())
    assert content["top_logprobs"] == [
        {"token": "token_id:1", "logprob": -0.5, "bytes": list(b"token_id:1")},
        {"token": "token_id:3", "logprob": -0.05, "bytes": list(b"token_id:3")},
    ]


@given(
    st.lists(
        st.builds(
            TokenLogprob,
            token_id=st.integers(0, 256),
            logprob=st.floats(allow_nan=False, max_value=0.0),
            rank=st.none() | st.integers(1, 100),
            top=st.lists(st.builds(TopLogprob, st.integers(0, 256), st.just(-1.0)), max_size=4).map(
                tuple
            ),
        ),
        min_size=1,
        max_size=4,
    ),
    st.integers(0, 5),
)
def test_streamed_chat_logprobs_as_ids_equal_the_full_ones(
    positions: list[TokenLogprob], width: int
) -> None:
    formatter = LogprobFormatter(ByteMockTokenizer(), width, as_ids=True)
    assert formatter.chat_json(positions) == JSON_ENCODER.encode(formatter.chat(positions))


def test_completion_logprob_tokens_as_ids_and_their_offsets() -> None:
    formatter = LogprobFormatter(WORDS, 1, as_ids=True)
    rendered = formatter.completion([lp(1), lp(12)], initial_offset=5)
    assert rendered.tokens == ("token_id:1", "token_id:12")
    # vLLM's offsets advance by each rendered token's length.
    assert rendered.text_offset == (5, 5 + len("token_id:1"))
    assert rendered.top_logprobs[0] == {"token_id:1": -0.5, "token_id:3": -0.05}
    echoed = formatter.echoed_completion(7, [lp(1)], [lp(2)])
    assert echoed.tokens == ("token_id:7", "token_id:1", "token_id:2")


def test_a_requests_own_field_wins_over_the_servers_flag() -> None:
    on = FrontendOptions(return_tokens_as_token_ids=True)
    assert chat_plan(on).tokens_as_ids
    assert not chat_plan(on, return_tokens_as_token_ids=False).tokens_as_ids
    assert chat_plan(FrontendOptions(), return_tokens_as_token_ids=True).tokens_as_ids
    assert completion_plan(on).tokens_as_ids
    assert not completion_plan(FrontendOptions()).tokens_as_ids


def test_streamed_chat_logprobs_render_tokens_as_ids() -> None:
    plan = plan_of(stream=True, logprobs=1, tokens_as_ids=True)
    chunks, _ = assembled(plan, [TokenDelta(0, (1,), (lp(1),)), FINISH])
    tokens = [
        e["token"]
        for c in chunks
        for ch in c["choices"]
        if ch.get("logprobs")
        for e in ch["logprobs"]["content"]
    ]
    assert tokens == ["token_id:1"]


def usage_of(plan: GeneratePlan, finish: ChoiceFinished) -> dict[str, Any]:
    chunks, body = assembled(plan, [TokenDelta(0, (1,)), finish])
    if body is not None:
        return dict(body["usage"])
    return dict(chunks[-1]["usage"])


def test_prompt_tokens_details_always_with_the_flag_as_vllm_shapes_them() -> None:
    cold = ChoiceFinished(0, "length", None, 3, 1, cached_tokens=0, cache_creation_tokens=2)
    chat = usage_of(plan_of(prompt_tokens_details=True), cold)
    assert chat["prompt_tokens_details"] == {
        "cached_tokens": 0,
        "created_cache_tokens": 2,
        "multimodal_tokens": None,
    }
    openai.types.CompletionUsage.model_validate(chat)
    # A stream's usage leaves out what is null (vLLM's, measured).
    chat_stream = plan_of(prompt_tokens_details=True, stream=True, include_usage=True)
    assert usage_of(chat_stream, cold)["prompt_tokens_details"] == {
        "cached_tokens": 0,
        "created_cache_tokens": 2,
    }
    # An engine that does not say what it cached: null, as vLLM's.
    unknown = ChoiceFinished(0, "length", None, 3, 1, cached_tokens=1)
    details = usage_of(plan_of(prompt_tokens_details=True), unknown)["prompt_tokens_details"]
    assert details["created_cache_tokens"] is None
    full = usage_of(plan_of(Endpoint.COMPLETION, prompt_tokens_details=True), cold)
    assert full["prompt_tokens_details"] == {
        "cached_tokens": 0,
        "created_cache_tokens": None,
        "multimodal_tokens": None,
    }
    streamed = plan_of(
        Endpoint.COMPLETION, prompt_tokens_details=True, stream=True, include_usage=True
    )
    assert usage_of(streamed, cold)["prompt_tokens_details"] == {"cached_tokens": 0}
    # Without the flag: only when the engine reported cached tokens (ours, docs/client-apis.md).
    assert "prompt_tokens_details" not in usage_of(plan_of(), cold)
    warm = ChoiceFinished(0, "length", None, 3, 1, cached_tokens=2)
    assert usage_of(plan_of(), warm)["prompt_tokens_details"] == {"cached_tokens": 2}


def test_prompt_tokens_details_count_the_images_tokens() -> None:
    image = MediaFeature(identifier="a", offset=0, length=2, is_embed=None, fields=())
    plan = plan_of(prompt_tokens_details=True, media=(image, image))
    details = usage_of(plan, FINISH)["prompt_tokens_details"]
    assert details["multimodal_tokens"] == {"image": 4}


GREETS: Final = "{{ greeting }}{% for m in messages %}|{{ m['content'] }}{% endfor %}{{ tools }}"


def rendered(frontend: FrontendOptions, **body: Any) -> str:
    template = ChatTemplate(GREETS, special_tokens={})
    model = msgspec.structs.replace(DEMO.prompt_model(), chat_template=template, frontend=frontend)
    request = decode_chat_request(json.dumps({"messages": [USER], **body}).encode())
    plan = prepare_chat(request, model, request_id="r", now=NOW)
    return DEMO.tokenizer.decode(plan.prompt_ids, skip_special_tokens=False)


TOOL: Final = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def test_default_template_kwargs_sit_under_the_requests_own() -> None:
    greeting = FrontendOptions(default_chat_template_kwargs={"greeting": "Hello"})
    assert rendered(greeting) == "Hello|Hi"
    assert rendered(greeting, chat_template_kwargs={"greeting": "Hey"}) == "Hey|Hi"
    assert rendered(FrontendOptions()) == "|Hi"


def test_tools_are_left_out_with_tool_choice_none_only_when_the_server_says() -> None:
    shown = rendered(FrontendOptions(), tools=[TOOL], tool_choice="none")
    assert "'name': 'f'" in shown
    hidden = FrontendOptions(exclude_tools_when_tool_choice_none=True)
    assert rendered(hidden, tools=[TOOL], tool_choice="none") == "|Hi"
    assert "'name': 'f'" in rendered(hidden, tools=[TOOL], tool_choice="required")


def test_a_requests_own_template_is_refused_unless_trusted() -> None:
    own = "{% for m in messages %}<{{ m['content'] }}>{% endfor %}"
    for body in ({"chat_template": own}, {"chat_template_kwargs": {"chat_template": own}}):
        with pytest.raises(ClientError, match="--trust-request-chat-template is not set") as no:
            rendered(FrontendOptions(), **body)
        assert no.value.param == next(iter(body))
    trusting = FrontendOptions(trust_request_chat_template=True)
    assert rendered(trusting, chat_template=own) == "<Hi>"
    # vLLM takes the template itself from `chat_template`, never from the kwargs' copy.
    assert rendered(trusting, chat_template_kwargs={"chat_template": own}) == "|Hi"
    with pytest.raises(ClientError) as broken:
        rendered(trusting, chat_template="{% for %}")
    assert broken.value.param == "chat_template"


def test_forced_usage_puts_usage_on_every_chunk_of_a_stream() -> None:
    forced = FrontendOptions(force_include_usage=True)
    streamed = chat_plan(forced, stream=True)
    assert (streamed.include_usage, streamed.continuous_usage) == (True, True)
    assert not chat_plan(forced).include_usage  # a full answer always has its usage
    plain = chat_plan(FrontendOptions(), stream=True)
    assert (plain.include_usage, plain.continuous_usage) == (False, False)
    completion = completion_plan(forced, stream=True)
    assert (completion.include_usage, completion.continuous_usage) == (True, True)
