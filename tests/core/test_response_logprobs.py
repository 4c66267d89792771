"""Logprobs, usage and echo in the assembled response (issue 11): OpenAI's shapes as vLLM's
server returns them, parsed by the `openai` SDK; logprobs held with their tokens by the stop
scanner; usage counting what the client got."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Final

import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from smg_trio.core.logprobs import LOWEST_LOGPROB, LogprobFormatter, TokenStrings
from smg_trio.core.plan import GeneratePlan, StopSpec
from smg_trio.core.prepare import prepare_chat
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.model.hf_tokenizer import ModelTokenizer
from smg_trio.neutral.events import ChoiceFinished, TokenDelta, TokenLogprob, TopLogprob
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.wire.openai_decode import decode_chat_request
from smg_trio.wire.openai_responses import JSON_ENCODER
from tests.core.mock_tokenizers import ByteMockTokenizer, WordMockTokenizer

T1 = WordMockTokenizer()
DEMO: Final = load_model_dir(demo_model_path())
NOW: Final = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)


def make(
    endpoint: Endpoint = Endpoint.CHAT,
    *,
    logprobs: int | None = 2,
    stop: tuple[str, ...] = (),
    stream: bool = True,
    include_usage: bool = False,
    continuous_usage: bool = False,
    echo: str | None = None,
    no_stop_trim: bool = False,
    tokenizer: TokenizerLike = T1,
) -> ResponseAssembler:
    plan = GeneratePlan(
        request_id="r1",
        endpoint=endpoint,
        model="m",
        prompt_ids=(1, 2, 3),
        sampling=SamplingParams(stop=stop, logprobs=logprobs),
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous_usage,
        echo_text=echo,
        stop_spec=StopSpec(strings=stop, token_ids=(999,), no_stop_trim=no_stop_trim),
    )
    return ResponseAssembler(plan, tokenizer, created=1700000000)


def lp(token_id: int) -> TokenLogprob:
    """A position whose sampled token is `token_id` (logprob -0.1 * id) and whose top-3 are
    token 3 (-0.05), the sampled one, and token 4 (-2.0)."""
    value = -0.1 * token_id
    top = (TopLogprob(3, -0.05), TopLogprob(token_id, value), TopLogprob(4, -2.0))
    return TokenLogprob(token_id=token_id, logprob=value, rank=2, top=top)


def delta(token_ids: list[int], index: int = 0) -> TokenDelta:
    return TokenDelta(index, tuple(token_ids), tuple(lp(t) for t in token_ids))


def objs(payloads: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(p) for p in payloads]


def chat_positions(payloads: list[bytes]) -> list[list[str]]:
    """Per chunk with logprobs: the token strings it carries."""
    return [
        [entry["token"] for entry in c["logprobs"]["content"]]
        for o in objs(payloads)
        for c in o["choices"]
        if c.get("logprobs")
    ]


def test_chat_stream_logprobs_shape_parsed_by_the_sdk() -> None:
    a = make()
    out = a.on_events([delta([1, 2])]) + a.on_events([ChoiceFinished(0, "length", None, 3, 2)])
    for payload in out:
        openai.types.chat.ChatCompletionChunk.model_validate_json(payload)
    content = objs(out)[1]["choices"][0]
    assert content["delta"] == {"content": "Hello world"}
    first, second = content["logprobs"]["content"]
    # Each token decoded alone ("world", not " world"); bytes are its UTF-8.
    assert first["token"] == "Hello"
    assert first["bytes"] == list(b"Hello")
    assert second["token"] == "world"
    assert second["logprob"] == pytest.approx(-0.2)
    # vLLM's order: the sampled token first, then the top-k without it; top_logprobs=2 of them.
    assert [(t["token"], t["logprob"]) for t in first["top_logprobs"]] == [
        ("Hello", pytest.approx(-0.1)),
        ("test", -0.05),
    ]
    assert all(t["bytes"] == list(t["token"].encode()) for t in first["top_logprobs"])


def test_chat_top_logprobs_zero_gives_empty_lists_and_no_request_gives_null() -> None:
    a = make(logprobs=0, stream=False)
    a.on_events([delta([1]), ChoiceFinished(0, "length", None, 3, 1)])
    body = a.response_body()
    parsed = openai.types.chat.ChatCompletion.model_validate_json(body)
    assert parsed.choices[0].logprobs is not None
    content = parsed.choices[0].logprobs.content
    assert content is not None
    assert [(c.token, c.top_logprobs) for c in content] == [("Hello", [])]
    b = make(logprobs=None, stream=False)
    b.on_events([delta([1]), ChoiceFinished(0, "length", None, 3, 1)])
    assert json.loads(b.response_body())["choices"][0]["logprobs"] is None


def test_held_tokens_carry_their_logprobs_when_released() -> None:
    a = make(stop=("world test",))
    out = a.on_events([delta([1])]) + a.on_events([delta([2])])
    # "world" may begin the stop: held, and so is its logprob.
    assert chat_positions(out) == [["Hello"]]
    out = a.on_events([delta([4])])
    assert [c["choices"][0]["delta"]["content"] for c in objs(out)] == ["world token"]
    assert chat_positions(out) == [["world", "token"]]


def test_a_hidden_stops_tokens_never_appear_and_usage_counts_up_to_the_stop() -> None:
    a = make(stop=("world test",), stream=False)
    # One coalesced batch: the engine went on after the stop before the abort landed.
    a.on_events([delta([1, 2, 3, 4, 4, 4])])
    assert a.done
    body = json.loads(a.response_body())
    choice = body["choices"][0]
    assert choice["message"]["content"] == "Hello "
    assert [c["token"] for c in choice["logprobs"]["content"]] == ["Hello"]
    # vLLM counts up to and including the stop's tokens: Hello, world, test.
    assert body["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize("logprobs", [None, 1])
def test_usage_is_not_over_counted_after_a_multi_token_stop(logprobs: int | None) -> None:
    a = make(stop=("world test",), logprobs=logprobs, include_usage=True)
    events = [delta([1, 2, 3, 4, 4, 4, 4, 4])]
    if logprobs is None:
        events = [TokenDelta(0, (1, 2, 3, 4, 4, 4, 4, 4))]
    a.on_events(events)
    assert a.done
    assert a.completion_tokens == 3
    usage = a.stream_end().usage
    assert usage is not None
    assert usage.completion_tokens == 3


def test_a_visible_stop_token_shows_its_logprob_a_hidden_one_not() -> None:
    hidden = make(stream=False)
    hidden.on_events([delta([1, 999, 4])])
    content = json.loads(hidden.response_body())["choices"][0]["logprobs"]["content"]
    assert [c["token"] for c in content] == ["Hello"]
    visible = make(stream=False, no_stop_trim=True)
    visible.on_events([delta([1, 999, 4])])
    content = json.loads(visible.response_body())["choices"][0]["logprobs"]["content"]
    assert [c["token"] for c in content] == ["Hello", "<eos>"]


def test_completion_logprobs_non_stream_shape() -> None:
    a = make(Endpoint.COMPLETION, logprobs=1, stream=False)
    a.on_events([delta([1, 2]), ChoiceFinished(0, "length", None, 3, 2)])
    body = a.response_body()
    parsed = openai.types.Completion.model_validate_json(body)
    logprobs = parsed.choices[0].logprobs
    assert logprobs is not None
    assert logprobs.tokens == ["Hello", "world"]
    assert logprobs.token_logprobs == pytest.approx([-0.1, -0.2])
    # logprobs=1: the sampled token and one more (vLLM shows logprobs + 1 entries).
    assert logprobs.top_logprobs == [
        {"Hello": pytest.approx(-0.1), "test": -0.05},
        {"world": pytest.approx(-0.2), "test": -0.05},
    ]
    # Offsets advance by each token string's length (vLLM's rule).
    assert logprobs.text_offset == [0, 5]


def test_completion_stream_offsets_continue_after_the_echo_and_earlier_chunks() -> None:
    a = make(Endpoint.COMPLETION, logprobs=0, echo="Say:")
    out = a.on_events([delta([1])]) + a.on_events([delta([2])])
    out += a.on_events([ChoiceFinished(0, "length", None, 3, 2)])
    chunks = [c["choices"][0] for c in objs(out)]
    # vLLM's server puts the prompt's ids on a streamed echo, asked for or not.
    echo = {"text": "Say:", "index": 0, "logprobs": None, "finish_reason": None}
    assert chunks[0] == {**echo, "prompt_token_ids": [1, 2, 3]}
    assert chunks[1]["logprobs"]["text_offset"] == [4]
    assert chunks[2]["text"] == " world"
    assert chunks[2]["logprobs"]["text_offset"] == [9]
    assert chunks[2]["logprobs"]["top_logprobs"] == [{"world": pytest.approx(-0.2)}]


def chat_entries(a: ResponseAssembler, out: list[bytes], stream: bool) -> list[dict[str, Any]]:
    if not stream:
        return list(json.loads(a.response_body())["choices"][0]["logprobs"]["content"])
    return [
        entry
        for chunk in objs(out)
        for choice in chunk["choices"]
        if choice.get("logprobs")
        for entry in choice["logprobs"]["content"]
    ]


def test_a_character_split_over_tokens_is_completed_by_the_tokens_before_it_as_vllm() -> None:
    """vLLM's logprobs processor decodes a token whose text alone ends in U+FFFD again after the
    sampled tokens before it: "" while the character is incomplete, the whole character on the
    token that completes it; a whole-character token before it keeps its own text. Streamed in
    separate chunks the context carries over."""
    expected = [("A", [0x41]), ("", []), ("", []), ("€", list("€".encode()))]
    for stream in (False, True):
        a = make(tokenizer=ByteMockTokenizer(), stream=stream)
        out: list[bytes] = []
        for event in (delta([0x41, 0xE2]), delta([0x82]), delta([0xAC])):
            out += a.on_events([event])
        out += a.on_events([ChoiceFinished(0, "length", None, 3, 4)])
        assert [(c["token"], c["bytes"]) for c in chat_entries(a, out, stream)] == expected


def test_split_character_alternatives_use_the_sampled_tokens_before_them() -> None:
    """Top alternatives are completed with the sampled tokens before their position (never
    with each other): after a sampled 0xC3, the alternative 0xA8 is "è"; the first position's
    partial alternative has no context: ""."""
    first = TokenLogprob(0xC3, -0.1, 1, (TopLogprob(0xC3, -0.1), TopLogprob(0xE2, -0.2)))
    second = TokenLogprob(0xA9, -0.3, 1, (TopLogprob(0xA9, -0.3), TopLogprob(0xA8, -0.4)))
    for endpoint in (Endpoint.CHAT, Endpoint.COMPLETION):
        a = make(endpoint, tokenizer=ByteMockTokenizer(), stream=False, logprobs=2)
        a.on_events([TokenDelta(0, (0xC3, 0xA9), (first, second))])
        a.on_events([ChoiceFinished(0, "length", None, 3, 2)])
        choice = json.loads(a.response_body())["choices"][0]
        if endpoint is Endpoint.CHAT:
            tops = [[t["token"] for t in c["top_logprobs"]] for c in choice["logprobs"]["content"]]
            assert tops == [["", ""], ["é", "è"]]
        else:
            assert choice["logprobs"]["tokens"] == ["", "é"]
            assert [list(t) for t in choice["logprobs"]["top_logprobs"]] == [[""], ["é", "è"]]
            assert choice["logprobs"]["text_offset"] == [0, 0]  # "" advances by nothing


def test_continuous_usage_stats_put_running_usage_on_every_chunk() -> None:
    a = make(logprobs=None, include_usage=True, continuous_usage=True)
    out = a.on_events([TokenDelta(0, (1,))]) + a.on_events([TokenDelta(0, (2, 3))])
    out += a.on_events([ChoiceFinished(0, "length", None, 3, 3)])
    out += list(a.stream_end().payloads)
    for payload in out:
        openai.types.chat.ChatCompletionChunk.model_validate_json(payload)
    usages = [(o["usage"]["completion_tokens"], len(o["choices"])) for o in objs(out)]
    # role, two content chunks, the finish chunk, then the final usage chunk.
    assert usages == [(0, 1), (1, 1), (3, 1), (3, 1), (3, 0)]
    plain = make(logprobs=None, include_usage=True)
    out = plain.on_events([TokenDelta(0, (1,))])
    assert all("usage" not in o for o in objs(out))


def test_cached_prompt_tokens_are_reported_in_usage_details() -> None:
    a = make(logprobs=None, stream=False)
    a.on_events([TokenDelta(0, (1,)), ChoiceFinished(0, "length", None, 3, 1, cached_tokens=2)])
    parsed = openai.types.chat.ChatCompletion.model_validate_json(a.response_body())
    assert parsed.usage is not None
    assert parsed.usage.prompt_tokens_details is not None
    assert parsed.usage.prompt_tokens_details.cached_tokens == 2
    b = make(logprobs=None, stream=False)
    b.on_events([TokenDelta(0, (1,)), ChoiceFinished(0, "length", None, 3, 1)])
    assert "prompt_tokens_details" not in json.loads(b.response_body())["usage"]


def test_chat_echo_prefixes_the_last_message() -> None:
    a = make(logprobs=None, stream=False, echo="Sure, ")
    a.on_events([TokenDelta(0, (1,)), ChoiceFinished(0, "length", None, 3, 1)])
    assert json.loads(a.response_body())["choices"][0]["message"]["content"] == "Sure, Hello"
    b = make(logprobs=None, echo="Sure, ")
    out = b.on_events([TokenDelta(0, (1,))])
    deltas = [o["choices"][0]["delta"] for o in objs(out)]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"content": "Sure, "},
        {"content": "Hello"},
    ]


top_logprob = st.builds(
    TopLogprob,
    st.integers(0, 256),
    st.floats(allow_nan=False, max_value=0.0, width=32) | st.just(float("-inf")),
)


@given(
    st.lists(
        st.builds(
            TokenLogprob,
            token_id=st.integers(0, 256),
            logprob=st.floats(allow_nan=False, max_value=0.0) | st.just(float("-inf")),
            rank=st.none() | st.integers(1, 100),
            top=st.lists(top_logprob, max_size=6).map(tuple),
        ),
        min_size=1,
        max_size=4,
    ),
    st.integers(0, 20),
)
def test_spliced_chat_logprobs_equal_the_struct_encoding(
    positions: list[TokenLogprob], width: int
) -> None:
    formatter = LogprobFormatter(ByteMockTokenizer(), width)
    spliced = formatter.chat_json(positions)
    assert spliced == JSON_ENCODER.encode(formatter.chat(positions))
    assert all(entry["logprob"] >= LOWEST_LOGPROB for entry in json.loads(spliced)["content"])


def test_sentencepiece_tokens_keep_the_leading_spaces_decoding_alone_drops() -> None:
    """vLLM puts back the spaces a "▁" stood for; a byte-level piece is left as decoded."""
    vocab = {"\u2581Hello": 0, "\u2581world": 1, "<unk>": 2, "\u2581\u2581x": 3}
    hf = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    hf.pre_tokenizer = pre_tokenizers.Metaspace()
    hf.decoder = decoders.Metaspace()
    tokenizer = ModelTokenizer(hf)
    assert tokenizer.decode((1,), skip_special_tokens=False) == "world"  # what vLLM corrects
    strings = TokenStrings(tokenizer)
    assert [strings.entry(i)[0] for i in (0, 1, 3)] == [" Hello", " world", "  x"]
    assert strings.entry(1)[1] == tuple(b" world")


def test_chat_echo_takes_the_last_message_in_the_responses_role() -> None:
    def plan(messages: list[dict[str, str]], **extra: object) -> GeneratePlan:
        body = {"messages": messages, "echo": True, **extra}
        request = decode_chat_request(json.dumps(body).encode())
        return prepare_chat(request, DEMO.prompt_model(), request_id="r", now=NOW)

    user = {"role": "user", "content": "Hi"}
    assistant = {"role": "assistant", "content": "Sure, "}
    assert plan([user, assistant], add_generation_prompt=False).echo_text == "Sure, "
    assert plan([user, assistant]).echo_text == "Sure, "
    # With a generation prompt the response speaks as the assistant: a user turn is not echoed.
    assert plan([user]).echo_text is None
    # Without one, vLLM answers in the last message's role and echoes it.
    assert plan([user], add_generation_prompt=False).echo_text == "Hi"


def test_held_text_flushed_at_the_engine_finish_carries_its_logprobs() -> None:
    a = make(stop=("world test",))
    out = a.on_events([delta([1]), delta([2])])
    assert chat_positions(out) == [["Hello"]]
    out = a.on_events([ChoiceFinished(0, "length", None, 3, 2)])
    chunks = [c["choices"][0] for c in objs(out)]
    assert [(c["delta"], c["logprobs"]) for c in chunks][1] == ({}, None)  # the finish chunk
    assert chunks[0]["delta"] == {"content": "world"}
    assert chat_positions(out) == [["world"]]
