"""The parsed row of `python -m bench core_pipeline`, scaled down: a qwen3-style answer with a
hermes tool call through the assembler yields the right reasoning, content and call, at a
per-token cost within a loose bound (the bench's goal is 100,000 tokens/s; this checks a tenth
of it, min of three runs, so a loaded machine does not fail it while a per-token regression
of an order of magnitude does)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from harness.generations import (
    HARMONY_MODEL,
    HARMONY_PARSERS,
    PARSERS,
    STOP_SETS,
    harmony_generation,
    long_generation,
    parsed_generation,
)
from smg_trio.core.plan import GeneratePlan, StopSpec
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.events import ChoiceFinished, TokenDelta
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams

FLOOR_TOKENS_PER_S = 10_000


def fed_one_token_at_a_time(
    plan: GeneratePlan, tokenizer: TokenizerLike, ids: Sequence[int]
) -> tuple[list[bytes], float]:
    """The chunk payloads of `ids` fed to an assembler one token per batch, then the finish,
    and the best of three runs' seconds for the tokens (not the finish)."""
    best = float("inf")
    for _ in range(3):
        assembler = ResponseAssembler(plan, tokenizer, created=0)
        started = time.perf_counter()
        payloads = [
            p for token_id in ids for p in assembler.on_events([TokenDelta(0, (token_id,))])
        ]
        best = min(best, time.perf_counter() - started)
    payloads += assembler.on_events([ChoiceFinished(0, "stop", None, 1, len(ids))])
    return payloads, best


def test_the_parsed_pipeline_is_right_and_not_an_order_of_magnitude_slower() -> None:
    tokenizer = load_model_dir(demo_model_path()).tokenizer
    generation = long_generation(tokenizer, STOP_SETS[4])
    ids, arguments = parsed_generation(tokenizer, generation)
    thought, answer = (
        tokenizer.decode(part, skip_special_tokens=True)
        for part in (
            generation[: len(generation) // 3],
            generation[len(generation) // 3 :][: len(generation) // 3],
        )
    )
    plan = GeneratePlan(
        request_id="bench",
        endpoint=Endpoint.CHAT,
        model="demo",
        prompt_ids=(1,),
        sampling=SamplingParams(stop=STOP_SETS[4]),
        stream=True,
        stop_spec=StopSpec(strings=STOP_SETS[4]),
        parsers=PARSERS,
    )
    payloads, best = fed_one_token_at_a_time(plan, tokenizer, ids)
    deltas = [json.loads(p)["choices"][0]["delta"] for p in payloads]
    fragments = [c["function"]["arguments"] for d in deltas for c in d.get("tool_calls", [])]
    assert "".join(fragments) == arguments
    assert len(fragments) > 100  # streamed, not sent whole at the close
    assert "".join(d.get("reasoning_content", "") for d in deltas) == thought
    assert "".join(d.get("content", "") for d in deltas) == answer + "\n"
    assert json.loads(payloads[-1])["choices"][0]["finish_reason"] == "tool_calls"
    assert len(ids) / best >= FLOOR_TOKENS_PER_S


def test_the_harmony_pipeline_is_right_and_not_an_order_of_magnitude_slower() -> None:
    """The Harmony row (docs/tools-and-reasoning.md §10), scaled down the same way."""
    tokenizer = load_model_dir(HARMONY_MODEL).tokenizer
    generation = long_generation(tokenizer, STOP_SETS[4])
    ids = harmony_generation(tokenizer, generation)
    third = len(generation) // 3
    thought, preamble, payload = (
        tokenizer.decode(part, skip_special_tokens=True)
        for part in (generation[:third], generation[third : 2 * third], generation[2 * third :])
    )
    plan = GeneratePlan(
        request_id="bench",
        endpoint=Endpoint.CHAT,
        model="demo",
        prompt_ids=(1,),
        sampling=SamplingParams(),
        stream=True,
        stop_spec=StopSpec(skip_special_tokens=False),
        parsers=HARMONY_PARSERS,
    )
    payloads, best = fed_one_token_at_a_time(plan, tokenizer, ids)
    deltas = [json.loads(p)["choices"][0]["delta"] for p in payloads]
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "write"
    fragments = [c["function"]["arguments"] for c in calls]
    assert json.loads("".join(fragments)) == {"text": payload}
    assert len(fragments) > 100  # streamed, not sent whole at the close
    assert "".join(d.get("reasoning_content", "") for d in deltas) == thought
    assert "".join(d.get("content", "") for d in deltas) == preamble
    assert json.loads(payloads[-1])["choices"][0]["finish_reason"] == "tool_calls"
    assert len(ids) / best >= FLOOR_TOKENS_PER_S
