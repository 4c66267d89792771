"""Batched completions (`prompt` as a list): prepare keeps every prompt, finalize fans out one
engine request per prompt and choice (choice i * n + j, as vLLM numbers them), and the
assembler answers one choice set per prompt, echo per prompt, usage summed over prompts."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from smg_trio.core.finalize import WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.prepare import PromptModel, prepare_completion
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.errors import ClientError
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.events import ChoiceFinished, TokenDelta
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.wire.openai_decode import decode_completion_request

MODEL = load_model_dir(demo_model_path())
PROMPT_MODEL: PromptModel = MODEL.prompt_model()
TOKENIZER = PROMPT_MODEL.tokenizer
PROMPTS = ("Hello there", "A longer second prompt than the first")
WORD = tuple(TOKENIZER.encode(" there", add_special_tokens=False)[-1:])


def prepared(**body: Any) -> GeneratePlan:
    request = decode_completion_request(json.dumps({"max_tokens": 4, **body}).encode())
    return prepare_completion(request, PROMPT_MODEL, request_id="r")


def encoded(text: str) -> tuple[int, ...]:
    return tuple(TOKENIZER.encode(text, add_special_tokens=True))


def test_a_list_of_strings_or_of_id_lists_is_a_batch() -> None:
    plan = prepared(prompt=list(PROMPTS), n=2, echo=True)
    assert [p.ids for p in plan.prompts] == [encoded(t) for t in PROMPTS]
    assert [p.echo_text for p in plan.prompts] == list(PROMPTS)
    assert plan.choice_count == 4
    ids = [list(encoded(t)) for t in PROMPTS]
    by_ids = prepared(prompt=ids)
    assert [list(p.ids) for p in by_ids.prompts] == ids
    assert by_ids.choice_count == 2
    # A flat id list, or one string in a list, is still one prompt.
    assert prepared(prompt=ids[0]).batch_prompts == ()
    assert prepared(prompt=[PROMPTS[0]]).prompts == prepared(prompt=PROMPTS[0]).prompts


@pytest.mark.parametrize(
    "prompt",
    [["a", [1, 2]], [[1, 2], []], [[1, -2]], [["a"]]],
    ids=["mixed", "empty-ids", "negative-id", "nested-strings"],
)
def test_malformed_batches_are_400_naming_prompt(prompt: object) -> None:
    with pytest.raises(ClientError) as caught:
        prepared(prompt=prompt)
    assert (caught.value.param or "").startswith("prompt")


def test_every_prompt_of_a_batch_must_fit_the_context() -> None:
    context = PROMPT_MODEL.context_length
    assert context is not None
    with pytest.raises(ClientError):
        prepared(prompt=["ok", [5] * context])


def test_finalize_fans_out_per_prompt_and_choice() -> None:
    plan = prepared(prompt=list(PROMPTS), n=2, seed=7)
    out = finalize(plan, WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ), TOKENIZER)
    assert [r.choice_index for r in out.requests] == [0, 1, 2, 3]
    assert [r.request_id for r in out.requests] == ["r-0", "r-1", "r-2", "r-3"]
    assert [r.prompt_ids for r in out.requests] == [encoded(PROMPTS[0])] * 2 + [
        encoded(PROMPTS[1])
    ] * 2
    # Each prompt is seeded as it would be alone.
    assert [r.sampling.seed for r in out.requests] == [7, 8, 7, 8]


def run_assembler(plan: GeneratePlan) -> tuple[ResponseAssembler, list[bytes]]:
    assembler = ResponseAssembler(plan, TOKENIZER, created=1)
    word = WORD
    events: list[TokenDelta | ChoiceFinished] = []
    for index in range(plan.choice_count):
        events += [TokenDelta(index, word * (index + 1))]
        events += [ChoiceFinished(index, "length", None, 0, index + 1)]
    payloads = assembler.on_events(events)
    assert assembler.done
    return assembler, payloads


def test_one_choice_set_per_prompt_with_its_echo_and_summed_usage() -> None:
    plan = prepared(prompt=list(PROMPTS), n=2, echo=True)
    assembler, _ = run_assembler(plan)
    body = json.loads(assembler.response_body())
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    for choice in body["choices"]:
        prompt = PROMPTS[choice["index"] // 2]
        generated = WORD * (choice["index"] + 1)
        assert choice["text"] == prompt + TOKENIZER.decode(generated, skip_special_tokens=True)
    prompt_tokens = sum(len(encoded(t)) for t in PROMPTS)
    assert body["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 1 + 2 + 3 + 4,
        "total_tokens": prompt_tokens + 10,
    }


def test_a_batch_streams_every_choice_with_its_echo_first() -> None:
    plan = msgspec.structs.replace(
        prepared(prompt=list(PROMPTS), echo=True, stream=True), include_usage=True
    )
    assembler, payloads = run_assembler(plan)
    texts: dict[int, str] = {}
    for payload in payloads:
        for choice in json.loads(payload)["choices"]:
            texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
    decoded = [TOKENIZER.decode(WORD * k, skip_special_tokens=True) for k in (1, 2)]
    assert decoded[0]  # the generated text is not empty
    assert texts == {0: PROMPTS[0] + decoded[0], 1: PROMPTS[1] + decoded[1]}
    end = assembler.stream_end()
    assert [f.index for f in end.finish] == [0, 1]
    assert end.usage is not None
    assert end.usage.prompt_tokens == sum(len(encoded(t)) for t in PROMPTS)
