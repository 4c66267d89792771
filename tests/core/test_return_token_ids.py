"""vLLM's `return_token_ids` in the response assembler and the OpenAI renderers: the ids shown
are the ids usage counts (up to a router stop's own), a stream's ids ride on the chunk that
goes out next (a held stop prefix or parser markup keeps them for later), the prompt's ids go
on a choice's first chunk, and nothing is shown unasked or with hidden reasoning
(docs/request-fields.md §1)."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.plan import GeneratePlan, ParserSetup, PromptPart, StopSpec
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.neutral.events import ChoiceFinished, TokenDelta
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from tests.core.mock_tokenizers import BYTE_EOS, ByteMockTokenizer

T2 = ByteMockTokenizer()
PROMPT = (7, 8, 9)
STOP = "STOP"
TEXT = "<think>why</think>It is. STOP and more"


def plan(
    endpoint: Endpoint = Endpoint.CHAT,
    *,
    stream: bool = True,
    ids: bool = True,
    parsers: ParserSetup | None = None,
    prompts: tuple[PromptPart, ...] = (),
    echo: str | None = None,
) -> GeneratePlan:
    return GeneratePlan(
        request_id="r1",
        endpoint=endpoint,
        model="m",
        prompt_ids=PROMPT,
        sampling=SamplingParams(stop=(STOP,)),
        stream=stream,
        stop_spec=StopSpec(strings=(STOP,), token_ids=(BYTE_EOS,)),
        return_token_ids=ids,
        parsers=parsers,
        batch_prompts=prompts,
        echo_text=echo,
    )


def run(p: GeneratePlan, cuts: list[int]) -> tuple[list[dict[str, Any]], ResponseAssembler]:
    """TEXT's bytes as engine deltas cut at `cuts` (to every choice), then an engine finish."""
    a = ResponseAssembler(p, T2, created=1)
    ids = T2.encode(TEXT, add_special_tokens=False)
    bounds = [0, *sorted(set(cuts)), len(ids)]
    out: list[bytes] = []
    for start, end in itertools.pairwise(bounds):
        if start < end:
            for index in range(p.choice_count):
                out += a.on_events([TokenDelta(index, tuple(ids[start:end]))])
    for index in range(p.choice_count):
        out += a.on_events([ChoiceFinished(index, "length", None, 0, len(ids))])
    if p.stream:
        out += a.stream_end().payloads
    return [json.loads(each) for each in out], a


def counted() -> list[int]:
    """The ids usage counts: up to the one that completes the stop string."""
    text = T2.encode(TEXT, add_special_tokens=False)
    return text[: TEXT.index(STOP) + len(STOP)]


@given(st.lists(st.integers(1, len(TEXT) - 1), max_size=8))
def test_streamed_ids_join_to_the_counted_ids_whatever_the_cuts(cuts: list[int]) -> None:
    chunks, a = run(plan(), cuts)
    joined = [i for c in chunks for choice in c["choices"] for i in choice.get("token_ids", [])]
    assert joined == counted()
    assert a.completion_tokens == len(counted())
    role = chunks[0]
    assert role["prompt_token_ids"] == list(PROMPT)
    assert "token_ids" not in role["choices"][0]
    assert all("prompt_token_ids" not in c for c in chunks[1:])


def test_a_full_response_has_the_prompt_at_the_top_and_the_ids_per_choice() -> None:
    _, a = run(plan(stream=False), [3, 9])
    body = json.loads(a.response_body())
    assert body["prompt_token_ids"] == list(PROMPT)
    assert body["choices"][0]["token_ids"] == counted()
    assert body["choices"][0]["message"]["content"] == TEXT[: TEXT.index(STOP)]


def test_nothing_is_shown_unasked() -> None:
    chunks, _ = run(plan(ids=False), [5])
    assert all("prompt_token_ids" not in c for c in chunks)
    assert all("token_ids" not in ch for c in chunks for ch in c["choices"])
    _, full = run(plan(ids=False, stream=False), [5])
    body = json.loads(full.response_body())
    assert "prompt_token_ids" not in body
    assert "token_ids" not in body["choices"][0]


def test_parsed_markup_keeps_its_ids_for_the_next_chunk() -> None:
    parsers = ParserSetup(reasoning_parser="deepseek_r1")
    chunks, _ = run(plan(parsers=parsers), [1, 2, 3, 4, 5, 6, 7, 8, 20])
    joined = [i for c in chunks for choice in c["choices"] for i in choice.get("token_ids", [])]
    assert joined == counted()
    reasoning = "".join(ch["delta"].get("reasoning") or "" for c in chunks for ch in c["choices"])
    assert reasoning == "why"


def test_hidden_reasoning_hides_the_ids_as_vllm() -> None:
    hidden = ParserSetup(reasoning_parser="deepseek_r1", include_reasoning=False)
    chunks, _ = run(plan(parsers=hidden), [4, 12])
    assert chunks[0]["prompt_token_ids"] == list(PROMPT)  # the prompt's are still shown
    assert all("token_ids" not in ch for c in chunks for ch in c["choices"])
    _, full = run(plan(parsers=hidden, stream=False), [4])
    assert "token_ids" not in json.loads(full.response_body())["choices"][0]


def test_completions_choices_carry_their_own_prompts_ids_once() -> None:
    prompts = (PromptPart(ids=(7, 8)), PromptPart(ids=(9,)))
    chunks, _ = run(plan(Endpoint.COMPLETION, prompts=prompts), [6])
    firsts: dict[int, list[int]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            if "prompt_token_ids" in choice:
                assert choice["index"] not in firsts
                firsts[choice["index"]] = choice["prompt_token_ids"]
    assert firsts == {0: [7, 8], 1: [9]}
    _, full = run(plan(Endpoint.COMPLETION, prompts=prompts, stream=False), [6])
    choices = json.loads(full.response_body())["choices"]
    assert [c["prompt_token_ids"] for c in choices] == [[7, 8], [9]]
    assert [c["token_ids"] for c in choices] == [counted(), counted()]


def test_a_streamed_echo_carries_the_prompts_ids_even_unasked() -> None:
    chunks, _ = run(plan(Endpoint.COMPLETION, ids=False, echo="Say:"), [6])
    echo = chunks[0]["choices"][0]
    assert echo["text"] == "Say:"
    assert echo["prompt_token_ids"] == list(PROMPT)
    assert "token_ids" not in echo
    assert all("prompt_token_ids" not in ch for c in chunks[1:] for ch in c["choices"])
