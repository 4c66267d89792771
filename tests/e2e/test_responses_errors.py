"""Bad `/v1/responses` bodies get OpenAI's error JSON with the right status and the field they
got wrong, before any engine work (docs/client-apis.md §3.1): a table of cases, over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio

from tests.e2e.live_server import MODEL, LiveServer, live_server

TEST_TIMEOUT_S: Final = 30.0
MESSAGE: Final = {"role": "user", "content": "Hi"}
FUNCTION: Final = {"type": "function", "name": "f", "parameters": {"type": "object"}}

# (case, body or raw bytes, status, param)
CASES: Final[list[tuple[str, Any, int, str | None]]] = [
    ("not json", b"{", 400, None),
    ("no input", {"model": MODEL}, 400, "input"),
    ("empty input", {"input": []}, 400, "input"),
    ("unknown field", {"input": "Hi", "frobnicate": 1}, 400, "frobnicate"),
    ("include", {"input": "Hi", "include": ["message.output_text.logprobs"]}, 400, "include"),
    ("background unstored", {"input": "Hi", "background": True, "store": False}, 400, "background"),
    ("background not a flag", {"input": "Hi", "background": "yes"}, 400, "background"),
    ("web search tool", {"input": "Hi", "tools": [{"type": "web_search"}]}, 400, "tools[0].type"),
    (
        "image part without its image",  # images are taken (docs/images.md): a URL is needed
        {"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
        400,
        "input[0].content[0].image_url",
    ),
    ("unknown item", {"input": [{"type": "file_search_call", "id": "x"}]}, 400, "input[0].type"),
    (
        "call without id",
        {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
        400,
        "input[0].call_id",
    ),
    ("bad role", {"input": [{"role": "robot", "content": "Hi"}]}, 400, "input[0].role"),
    ("zero max_output_tokens", {"input": "Hi", "max_output_tokens": 0}, 400, "max_output_tokens"),
    ("temperature", {"input": "Hi", "temperature": 9}, 400, "temperature"),
    (
        "reasoning summary",
        {"input": "Hi", "reasoning": {"summary": "auto"}},
        400,
        "reasoning.summary",
    ),
    (
        "schema missing",
        {"input": "Hi", "text": {"format": {"type": "json_schema", "name": "x"}}},
        400,
        "text.format.schema",
    ),
    ("metadata", {"input": "Hi", "metadata": {f"k{i}": "v" for i in range(17)}}, 400, "metadata"),
    ("required without tools", {"input": "Hi", "tool_choice": "required"}, 400, "tool_choice"),
    ("auto without a parser", {"input": "Hi", "tools": [FUNCTION]}, 400, "tool_choice"),
    ("unknown model", {"input": "Hi", "model": "gpt-9"}, 404, "model"),
    (
        "unknown previous",
        {"input": "Hi", "previous_response_id": "resp_x"},
        404,
        "previous_response_id",
    ),
]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(tmp_path, with_engine=False) as running:
        yield running


def post_all(server: LiveServer) -> list[httpx.Response]:
    with httpx.Client(base_url=server.base_url, headers=server.auth, timeout=20) as client:
        return [
            client.post(
                "/v1/responses",
                content=body if isinstance(body, bytes) else None,
                json=None if isinstance(body, bytes) else body,
            )
            for _, body, _, _ in CASES
        ]


async def test_bad_bodies(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        answers = await trio.to_thread.run_sync(post_all, server)
    for (case, _, status, param), answer in zip(CASES, answers, strict=True):
        error = answer.json()["error"]
        assert (case, answer.status_code, error["param"]) == (case, status, param), error
        assert set(error) == {"message", "type", "param", "code"}
        assert error["message"]
