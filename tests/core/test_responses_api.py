"""The Responses API's pure parts (docs/client-apis.md §3): a body prepared as the chat request
it means, and the response assembler's output through the Responses renderer and dialect: for
any text cut into any engine batches, the numbered events rebuild the body's text; a failure
mid-stream is an `error` event then `response.failed`, numbered on."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.core.plan import GeneratePlan
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.core.responses_dialect import ResponsesDialect
from smg_trio.core.responses_request import prepare_responses
from smg_trio.errors import ClientError, EngineRejected
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.events import ChoiceFinished, TokenDelta
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import ConstraintKind
from smg_trio.wire.responses_api import decode_responses_request

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
DEMO = load_model_dir(demo_model_path())
MODEL = DEMO.prompt_model()
TOKENIZER = MODEL.tokenizer


def plan_of(body: dict[str, Any], history: list[Any] | None = None) -> GeneratePlan:
    req = decode_responses_request(msgspec.json.encode(body))
    return prepare_responses(req, history or [], MODEL, request_id="r1", now=NOW)


def events_of(framed: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in framed.decode().split("\n\n"):
        if block:
            name, data = block.split("\n", 1)
            out.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def test_a_body_is_the_chat_request_it_means() -> None:
    plan = plan_of(
        {
            "input": [{"role": "user", "content": "Hi"}],
            "instructions": "Be brief.",
            "max_output_tokens": 7,
            "temperature": 0.5,
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
        }
    )
    assert plan.endpoint is Endpoint.RESPONSES
    assert plan.sampling.max_tokens == 7
    assert plan.sampling.temperature == 0.5
    constraint = plan.sampling.constraint
    assert constraint is not None
    assert constraint.kind is ConstraintKind.JSON_SCHEMA
    assert constraint.param == "text.format.schema"  # finalize's 400s name the client's field
    prompt = TOKENIZER.decode(list(plan.prompt_ids), skip_special_tokens=False)
    assert prompt.index("Be brief.") < prompt.index("Hi")
    # A string input is one user message: the same prompt as its message form.
    assert plan_of({"input": "Hi", "instructions": "Be brief."}).prompt_ids == plan.prompt_ids
    # The stored conversation goes first; instructions are not carried over.
    continued = plan_of({"input": "More"}, [{"type": "message", "role": "user", "content": "Hi"}])
    text = TOKENIZER.decode(list(continued.prompt_ids), skip_special_tokens=False)
    assert text.index("Hi") < text.index("More")
    assert "Be brief." not in text
    assert continued.responses is not None
    assert json.loads(continued.responses.conversation) == [
        {"type": "message", "role": "user", "content": "Hi"},
        {"type": "message", "role": "user", "content": "More"},
    ]


def test_chat_errors_name_the_responses_field() -> None:
    with pytest.raises(ClientError) as error:
        plan_of({"input": "Hi", "max_output_tokens": 10**9, "top_p": 7})
    assert error.value.param == "top_p"
    with pytest.raises(ClientError) as error:
        plan_of({"input": "Hi" * 5000})  # longer than the demo model's context
    assert error.value.param == "input"


def streamed(
    plan: GeneratePlan, batches: list[tuple[int, ...]], reason: str
) -> tuple[bytes, ResponsesDialect]:
    assembler = ResponseAssembler(plan, TOKENIZER, created=1)
    dialect = ResponsesDialect()
    framed = b""
    for batch in batches:
        framed += dialect.frame(assembler.on_events([TokenDelta(0, batch)]))
    count = sum(len(batch) for batch in batches)
    framed += dialect.frame(assembler.on_events([ChoiceFinished(0, reason, None, 3, count)]))
    return framed + dialect.end(assembler.stream_end().payloads), dialect


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(alphabet=st.characters(codec="utf-8"), max_size=80),
    cuts=st.lists(st.integers(min_value=1, max_value=5), max_size=30),
    reason=st.sampled_from(["stop", "length"]),
)
def test_streamed_events_rebuild_the_body(text: str, cuts: list[int], reason: str) -> None:
    ids = tuple(TOKENIZER.encode(text, add_special_tokens=False))
    batches, start = [], 0
    for cut in [*cuts, len(ids)]:
        if start < len(ids):
            batches.append(ids[start : start + cut])
            start += cut
    stream_plan = plan_of({"input": "Hi", "stream": True})
    # No EOS stop: a text spelling a special token must stream as text here.
    no_eos = msgspec.structs.replace(stream_plan.stop_spec, token_ids=())
    stream_plan = msgspec.structs.replace(stream_plan, stop_spec=no_eos)
    framed, _ = streamed(stream_plan, batches, reason)
    events = events_of(framed)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert all(name == data["type"] for name, data in events)
    deltas = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    final_name, final = events[-1]
    assert final_name == ("response.incomplete" if reason == "length" else "response.completed")
    output = final["response"]["output"]
    assert [item["type"] for item in output] == ["message"]
    assert output[0]["content"][0]["text"] == deltas
    # The whole body of the same engine output says the same.
    whole_plan = msgspec.structs.replace(stream_plan, stream=False)
    assembler = ResponseAssembler(whole_plan, TOKENIZER, created=1)
    assembler.on_events([TokenDelta(0, ids), ChoiceFinished(0, reason, None, 3, len(ids))])
    body = json.loads(assembler.response_body())
    assert body["output"][0]["content"][0]["text"] == deltas
    assert body["status"] == final["response"]["status"]


def test_a_failure_mid_stream_is_error_then_response_failed() -> None:
    plan = plan_of({"input": "Hi", "stream": True, "metadata": {"k": "v"}})
    assembler = ResponseAssembler(plan, TOKENIZER, created=1)
    dialect = ResponsesDialect()
    framed = dialect.frame(assembler.on_events([TokenDelta(0, (300, 301))]))
    failure = EngineRejected("the engine went away")
    framed += dialect.stream_error(failure)
    events = events_of(framed)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    (error_name, error), (failed_name, failed) = events[-2:]
    assert error_name == "error"
    assert error["message"] == failure.message
    assert error["code"] == failure.code
    assert failed_name == "response.failed"
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {"code": failure.code, "message": failure.message}
    assert failed["response"]["metadata"] == {"k": "v"}
    # Before `response.created` there is no response to fail: the error event alone.
    assert [
        name for name, _ in events_of(ResponsesDialect().stream_error(EngineRejected("x")))
    ] == ["error"]
