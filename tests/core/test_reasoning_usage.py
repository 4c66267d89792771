"""Usage reports reasoning tokens where vLLM 0.32 does (docs/tools-and-reasoning.md §11): chat's
`completion_tokens_details` (full and streamed usage), Responses' `output_tokens_details`,
summed over choices, only when the model has a reasoning parser, never in completions."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from smg_trio.core.plan import GeneratePlan, ReasoningCount, StopSpec
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.neutral.events import ChoiceFinished, TokenDelta
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.wire.responses_objects import ResponseSettings
from tests.core.test_reasoning_tokens import END, START, tokenizer

R1 = ReasoningCount(parser="deepseek_r1")
EOS = 0  # <|endoftext|>


def plan(
    endpoint: Endpoint = Endpoint.CHAT,
    *,
    rule: ReasoningCount | None = R1,
    n: int = 1,
    stream: bool = False,
    stop: tuple[str, ...] = (),
) -> GeneratePlan:
    return GeneratePlan(
        request_id="r1",
        endpoint=endpoint,
        model="m",
        prompt_ids=(1, 2, 3),
        sampling=SamplingParams(stop=stop),
        n=n,
        stream=stream,
        include_usage=stream,
        stop_spec=StopSpec(strings=stop, token_ids=(EOS,)),
        reasoning_count=rule,
        responses=ResponseSettings() if endpoint is Endpoint.RESPONSES else None,
    )


def run(p: GeneratePlan, outputs: list[list[int]]) -> tuple[ResponseAssembler, list[bytes]]:
    assembler = ResponseAssembler(p, tokenizer(), created=1)
    out: list[bytes] = []
    for index, ids in enumerate(outputs):
        out += assembler.on_events([TokenDelta(index, tuple(ids))])
        out += assembler.on_events([ChoiceFinished(index, "length", None, 3, len(ids))])
    assert assembler.done
    return assembler, out


def body(p: GeneratePlan, outputs: list[list[int]]) -> dict[str, Any]:
    assembler, _ = run(p, outputs)
    parsed: dict[str, Any] = json.loads(assembler.response_body())
    return parsed


WORDS = [75, 619, 82]  # "hello"-ish text ids of the test tokenizer


def test_chat_sums_the_choices_counts() -> None:
    outputs = [[START, *WORDS, END, *WORDS], [START, *WORDS[:2]]]
    usage = body(plan(n=2), outputs)["usage"]
    assert usage["completion_tokens"] == 8 + 3
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 3 + 2}


def test_zero_is_reported_and_no_parser_reports_no_details() -> None:
    assert body(plan(), [WORDS])["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}
    assert "completion_tokens_details" not in body(plan(rule=None), [WORDS])["usage"]


def test_the_streamed_usage_chunk_carries_it() -> None:
    assembler, _ = run(plan(stream=True, n=2), [[START, *WORDS], [START, END, *WORDS]])
    (chunk,) = assembler.stream_end().payloads
    assert json.loads(chunk)["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}


def test_ids_after_a_stop_are_not_counted() -> None:
    stop = tokenizer().decode([WORDS[1]], skip_special_tokens=True)
    p = plan(stop=(stop,))
    assembler = ResponseAssembler(p, tokenizer(), created=1)
    assembler.on_events([TokenDelta(0, (START, WORDS[0], WORDS[1], WORDS[2], WORDS[2]))])
    assert assembler.done
    usage = json.loads(assembler.response_body())["usage"]
    assert usage["completion_tokens"] == 3
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 2}


@pytest.mark.parametrize("stream", [False, True])
def test_responses_report_output_tokens_details(stream: bool) -> None:
    p = plan(Endpoint.RESPONSES, stream=stream)
    assembler, _ = run(p, [[START, *WORDS, END, *WORDS]])
    if stream:
        (last,) = assembler.stream_end().payloads  # a named event: its data line
        response = json.loads(last.split(b"data: ", 1)[1])["response"]
    else:
        response = json.loads(assembler.response_body())
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 3
    assert "completion_tokens_details" not in response["usage"]


def test_messages_usage_has_no_reasoning_field() -> None:
    usage = body(plan(Endpoint.MESSAGES), [[START, *WORDS, END]])["usage"]
    assert set(usage) == {"input_tokens", "output_tokens"}


def test_continuous_usage_counts_each_choice_so_far() -> None:
    p = msgspec.structs.replace(plan(stream=True, n=2), continuous_usage=True)
    assembler = ResponseAssembler(p, tokenizer(), created=1)
    out = assembler.on_events([TokenDelta(0, (START, WORDS[0]))])
    out += assembler.on_events([TokenDelta(1, (WORDS[0],))])
    out += assembler.on_events([TokenDelta(0, (WORDS[1], END, WORDS[2]))])
    chunks = [json.loads(chunk) for chunk in out]
    details = [
        (c["choices"][0]["index"], c["usage"]["completion_tokens_details"]["reasoning_tokens"])
        for c in chunks
    ]
    # Role chunks report 0, as vLLM's; then each choice's own count so far.
    assert details[0] == (0, 0)
    assert details[-1] == (0, 2)
    assert (1, 0) in details
