"""The parsing chat renderer through the ResponseAssembler: however the engine's tokens are
batched (hypothesis, byte tokens splitting UTF-8 characters), the `openai` SDK's stream
accumulator rebuilds from the SSE payloads the body's content and tool_calls, the reasoning
deltas add up to the body's, and both finish alike; a router stop inside markup still ends
the choice with valid deltas (docs/tools-and-reasoning.md §4)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from smg_trio.core.plan import GeneratePlan, ParserSetup, StopSpec
from smg_trio.core.render import ChatStreamRenderer
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.neutral.events import ChoiceFinished, TokenDelta
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.wire.openai_responses import (
    JSON_ENCODER,
    ChoiceDelta,
    ChunkChoice,
    DeltaFunction,
    DeltaToolCall,
)
from smg_trio.wire.openai_responses import (
    ChatCompletionChunk as ChunkStruct,
)
from tests.core.mock_tokenizers import ByteMockTokenizer

T2 = ByteMockTokenizer()
SETUP = ParserSetup(
    tool_parser="hermes", tool_names=frozenset({"get_weather"}), reasoning_parser="qwen3"
)
MARKUP = (
    "<think>Café ☕ plan</think>Voilà.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Zürich", "n": [1, {"x": "}"}]}}\n'
    "</tool_call>\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
)


def plan(*, stream: bool, stops: tuple[str, ...] = (), setup: ParserSetup = SETUP) -> GeneratePlan:
    return GeneratePlan(
        request_id="r1",
        endpoint=Endpoint.CHAT,
        model="m",
        prompt_ids=(1,),
        sampling=SamplingParams(stop=stops),
        stream=stream,
        stop_spec=StopSpec(strings=stops, token_ids=(256,)),
        parsers=setup,
    )


def run(
    ids: Sequence[int],
    cuts: Sequence[int],
    *,
    stream: bool,
    stops: tuple[str, ...] = (),
    setup: ParserSetup = SETUP,
) -> tuple[ResponseAssembler, list[bytes]]:
    assembler = ResponseAssembler(plan(stream=stream, stops=stops, setup=setup), T2, created=1)
    points = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    payloads: list[bytes] = []
    for a, b in itertools.pairwise(points):
        if a < b and not assembler.done:
            payloads += assembler.on_events([TokenDelta(0, tuple(ids[a:b]))])
    if not assembler.done:
        payloads += assembler.on_events([ChoiceFinished(0, "stop", None, 1, len(ids))])
    payloads += assembler.stream_end().payloads
    return assembler, payloads


def accumulated(payloads: Sequence[bytes]) -> tuple[ChatCompletion, str, list[dict[str, Any]]]:
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    reasoning = ""
    deltas = []
    for payload in payloads:
        chunk = ChatCompletionChunk.model_validate_json(payload)
        state.handle_chunk(chunk)
        raw = json.loads(payload)
        for choice in raw["choices"]:
            deltas.append(choice["delta"])
            reasoning += choice["delta"].get("reasoning_content", "")
            assert choice["delta"].get("reasoning", "") == choice["delta"].get(
                "reasoning_content", ""
            )
    return state.get_final_completion(), reasoning, deltas


def check(
    ids: Sequence[int],
    cuts: Sequence[int],
    stops: tuple[str, ...] = (),
    setup: ParserSetup = SETUP,
) -> ChatCompletion:
    _, payloads = run(ids, cuts, stream=True, stops=stops, setup=setup)
    streamed, reasoning, _ = accumulated(payloads)
    whole, _ = run(ids, [], stream=False, stops=stops, setup=setup)
    body = json.loads(whole.response_body())
    message = body["choices"][0]["message"]
    got = streamed.choices[0]
    assert (got.message.content or None) == message["content"]
    assert reasoning == (message.get("reasoning_content") or "")
    calls = [(c.id, c.function.name, c.function.arguments) for c in got.message.tool_calls or ()]
    assert calls == [
        (c["id"], c["function"]["name"], c["function"]["arguments"])
        for c in message.get("tool_calls", [])
    ]
    assert got.finish_reason == body["choices"][0]["finish_reason"]
    return ChatCompletion.model_validate(body)


def test_one_token_per_byte() -> None:
    ids = T2.encode(MARKUP, add_special_tokens=False)
    body = check(ids, range(len(ids) + 1))
    message = body.choices[0].message
    assert message.content == "Voilà.\n"
    assert (message.model_extra or {})["reasoning_content"] == "Café ☕ plan"
    calls = [c.function for c in message.tool_calls or () if c.type == "function"]
    assert [(f.name, json.loads(f.arguments)) for f in calls] == [
        ("get_weather", {"city": "Zürich", "n": [1, {"x": "}"}]}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert body.choices[0].finish_reason == "tool_calls"


@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=30))
def test_any_batching_agrees(cuts: list[int]) -> None:
    check(T2.encode(MARKUP, add_special_tokens=False), cuts)


HARMONY = ParserSetup(
    tool_parser="openai", tool_names=frozenset({"get_weather"}), reasoning_parser="openai_gptoss"
)
HARMONY_MARKUP = (
    "<|channel|>analysis<|message|>Café ☕ plan<|end|><|start|>assistant<|channel|>commentary"
    "<|message|>Voilà.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
    '<|constrain|>json<|message|>{"city": "Zürich", "n": [1, {"x": "}"}]}'
)
MISTRAL = ParserSetup(tool_parser="mistral", tool_names=frozenset({"get_weather"}))
MISTRAL_MARKUP = (
    'Voilà. [TOOL_CALLS]get_weather[ARGS]{"city": "Zürich"}[TOOL_CALLS]get_weather[ARGS]'
    '{"city": "Oslo"}'
)


@pytest.mark.parametrize(
    ("setup", "markup"),
    [(HARMONY, HARMONY_MARKUP), (MISTRAL, MISTRAL_MARKUP)],
    ids=["harmony", "mistral_v11"],
)
@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=30))
def test_harmony_and_mistral_v11_any_batching_agrees(
    setup: ParserSetup, markup: str, cuts: list[int]
) -> None:
    body = check(T2.encode(markup, add_special_tokens=False), cuts, setup=setup)
    message = body.choices[0].message
    assert message.content == "Voilà."
    assert body.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("stop", ["plan", "Voil", '"Oslo"', "</tool_call>"])
def test_a_stop_inside_markup_ends_the_choice_with_what_was_parsed(stop: str) -> None:
    ids = T2.encode(MARKUP, add_special_tokens=False)
    body = check(ids, range(0, len(ids) + 1, 3), stops=(stop,))
    assert body.choices[0].finish_reason in ("stop", "tool_calls")


def test_spliced_chunks_equal_the_struct_encoding() -> None:
    chunks = ChatStreamRenderer(request_id="c", created=1, model="m", include_usage=False)

    def struct(delta: ChoiceDelta) -> bytes:
        choice = ChunkChoice(index=2, delta=delta)
        return JSON_ENCODER.encode(ChunkStruct(id="c", created=1, model="m", choices=(choice,)))

    text = 'ré"\\\n☕'
    assert chunks.reasoning(2, text) == struct(ChoiceDelta(reasoning_content=text, reasoning=text))
    call = DeltaToolCall(index=3, function=DeltaFunction(arguments=text))
    assert chunks.arguments(2, 3, text) == struct(ChoiceDelta(tool_calls=(call,)))
    assert msgspec.json.decode(chunks.arguments(2, 3, text))["choices"][0]["delta"] == {
        "tool_calls": [{"index": 3, "function": {"arguments": text}}]
    }


@pytest.mark.parametrize("stream", [True, False])
def test_include_reasoning_false_separates_reasoning_and_leaves_it_out(stream: bool) -> None:
    """vLLM's `include_reasoning: false`: the think block is neither content nor sent."""
    setup = msgspec.structs.replace(SETUP, include_reasoning=False)
    plain = msgspec.structs.replace(plan(stream=stream), parsers=setup)
    assembler = ResponseAssembler(plain, T2, created=1)
    ids = tuple(T2.encode(MARKUP, add_special_tokens=False))
    payloads = assembler.on_events([TokenDelta(0, ids), ChoiceFinished(0, "stop", None, 1, 9)])
    if stream:
        deltas = [json.loads(p)["choices"][0]["delta"] for p in payloads]
        assert not any("reasoning" in d or "reasoning_content" in d for d in deltas)
        assert "".join(d.get("content", "") for d in deltas) == "Voilà.\n"
    else:
        message = json.loads(assembler.response_body())["choices"][0]["message"]
        assert "reasoning" not in message
        assert "reasoning_content" not in message
        assert message["content"] == "Voilà.\n"
