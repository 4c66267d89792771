"""The openai SDK's parsing helpers end to end (issue: the SDK's helpers behave as against
OpenAI): `responses.parse` and `responses.stream(text_format=...)`, `chat.completions.parse`
and `chat.completions.stream(response_format=...)` send a JSON schema built from a pydantic
model; the gateway turns it into the engine's constraint (vLLM's EngineCore over ZMQ here, in
random mode), the reference engine says the schema's smallest instance as a grammar-guided
model says a valid one (docs/request-fields.md §5), and the SDK parses it back into the model.
An incomplete response (`max_output_tokens`) ends in `response.incomplete`: the SDK's
`get_final_response` raises on that against OpenAI too, so the client reads that event's
response (tests/e2e/test_responses_api.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final, Literal

import pytest
import trio
from pydantic import BaseModel, Field

from tests.e2e.live_server import MODEL, LiveServer, live_server, openai_client

pytestmark = pytest.mark.timeout(90)
TEST_TIMEOUT_S: Final = 60.0


class Step(BaseModel):
    explanation: str
    output: str


class Answer(BaseModel):
    steps: list[Step] = Field(min_length=1)
    final_answer: str
    confidence: Literal["low", "high"]
    score: int = Field(ge=1, le=10)


@pytest.fixture(params=["random", "replay"])
async def server(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[LiveServer]:
    """Random mode, and replay of a prose text as the demo's engine does (`make demo`): a
    grammar-guided model cannot say prose, so both say the schema's instance."""
    async with live_server(tmp_path, random_engines=request.param == "random") as running:
        yield running


async def test_responses_parse_returns_the_model(server: LiveServer) -> None:
    def call() -> Answer | None:
        with openai_client(server) as client:
            parsed = client.responses.parse(
                model=MODEL, input="Solve 8x + 7 = -23.", text_format=Answer
            )
            assert parsed.status == "completed"
            answer: Answer | None = parsed.output_parsed
            return answer

    with trio.fail_after(TEST_TIMEOUT_S):
        answer = await trio.to_thread.run_sync(call)
    assert answer is not None
    assert answer.confidence == "low"
    assert answer.score == 1
    assert len(answer.steps) == 1


async def test_responses_stream_with_a_text_format_gives_a_parsed_final_response(
    server: LiveServer,
) -> None:
    def call() -> tuple[Answer | None, list[str]]:
        with (
            openai_client(server) as client,
            client.responses.stream(model=MODEL, input="Solve it.", text_format=Answer) as stream,
        ):
            names = [event.type for event in stream]
            return stream.get_final_response().output_parsed, names

    with trio.fail_after(TEST_TIMEOUT_S):
        answer, names = await trio.to_thread.run_sync(call)
    assert isinstance(answer, Answer)
    assert names[0] == "response.created"
    assert names[-1] == "response.completed"


async def test_chat_completions_parse_and_stream_return_the_model(server: LiveServer) -> None:
    def call() -> tuple[Answer | None, Answer | None]:
        with openai_client(server) as client:
            messages = [{"role": "user", "content": "Solve 8x + 7 = -23."}]
            whole = client.chat.completions.parse(
                model=MODEL,
                messages=messages,
                response_format=Answer,
            )
            with client.chat.completions.stream(
                model=MODEL,
                messages=messages,
                response_format=Answer,
            ) as stream:
                streamed = stream.get_final_completion()
            return whole.choices[0].message.parsed, streamed.choices[0].message.parsed

    with trio.fail_after(TEST_TIMEOUT_S):
        whole, streamed = await trio.to_thread.run_sync(call)
    assert isinstance(whole, Answer)
    assert whole == streamed
