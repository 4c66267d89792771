"""vLLM's tokens-in/tokens-out `/inference/v1/generate` through the real server and the
reference vLLM EngineCore (docs/vllm-frontend.md §7): the generated ids equal those
/v1/completions returns for the same prompt ids (`return_token_ids`), streamed or not; usage,
finish and stop reasons in vLLM's shape; every field we do not serve refused by name."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio

from tests.e2e.live_server import API_KEY, MODEL, LiveServer, live_server

TEST_TIMEOUT_S: Final = 30.0
AUTH: Final = {"authorization": f"Bearer {API_KEY}"}
PATH: Final = "/inference/v1/generate"
PROMPT_IDS: Final = [1, 150, 590, 1024, 338]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(tmp_path) as running:
        yield running


def client(server: LiveServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.base_url, headers=AUTH, timeout=20)


def body(**extra: Any) -> dict[str, Any]:
    sampling = {"max_tokens": 12, "temperature": 0, **extra.pop("sampling", {})}
    return {"model": MODEL, "token_ids": PROMPT_IDS, "sampling_params": sampling, **extra}


async def completion_ids(http: httpx.AsyncClient, **sampling: Any) -> dict[str, Any]:
    answer = await http.post(
        "/v1/completions",
        json={
            "model": MODEL,
            "prompt": PROMPT_IDS,
            "max_tokens": 12,
            "temperature": 0,
            "return_token_ids": True,
            **sampling,
        },
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def sse_payloads(text: str) -> list[Any]:
    lines = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


async def test_the_ids_equal_completions_and_the_body_is_vllms_shape(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http:
            reference = await completion_ids(http)
            answer = await http.post(PATH, json=body(request_id="r-1", return_token_ids=True))
    assert answer.status_code == 200, answer.text
    got = answer.json()
    (choice,) = got["choices"]
    expected = reference["choices"][0]
    assert choice["token_ids"] == expected["token_ids"]
    assert (choice["finish_reason"], choice["stop_reason"]) == (
        expected["finish_reason"],
        expected["stop_reason"],
    )
    details = {"prompt_tokens_details": None, "completion_tokens_details": None}
    assert got["usage"] == {**reference["usage"], **details}
    assert got["request_id"] == "generate-tokens-r-1"
    assert got["prompt_token_ids"] == PROMPT_IDS
    assert (got["model"], got["output_mode"], got["prompt_logprobs"]) == (MODEL, "tokens", None)
    assert set(choice) == {
        "index",
        "finish_reason",
        "stop_reason",
        "token_ids",
        "routed_experts",
        "sampling_mask",
        "weight_versions",
        "logprobs",
    }
    # The reference engine names its weights as vLLM's EngineCore does: "default".
    assert choice["weight_versions"] == [
        {"version": "default", "start": 0, "end": len(choice["token_ids"])}
    ]


async def test_a_stream_carries_the_same_ids_then_the_usage(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http:
            whole = (
                await http.post(PATH, json=body(sampling={"n": 2, "seed": 7, "temperature": 1}))
            ).json()
            streamed = await http.post(
                PATH,
                json=body(
                    sampling={"n": 2, "seed": 7, "temperature": 1},
                    stream=True,
                    stream_options={"include_usage": True},
                    return_token_ids=True,
                ),
            )
    assert streamed.status_code == 200
    chunks = sse_payloads(streamed.text)
    assert chunks[0]["prompt_token_ids"] == PROMPT_IDS
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    *id_chunks, last = chunks
    assert last["choices"] == []
    assert last["usage"] == {k: v for k, v in whole["usage"].items() if v is not None}
    for choice in whole["choices"]:
        mine = [c["choices"][0] for c in id_chunks if c["choices"][0]["index"] == choice["index"]]
        assert [i for c in mine for i in c["token_ids"]] == choice["token_ids"]
        assert mine[-1]["finish_reason"] == choice["finish_reason"]
        assert mine[-1]["weight_versions"] == choice["weight_versions"]  # over every id
        assert all(c["finish_reason"] is None for c in mine[:-1])
        assert all(c["weight_versions"] is None for c in mine[:-1])
        assert all(c["usage"] is None and c["output_mode"] == "tokens" for c in id_chunks)


async def test_max_tokens_absent_is_the_room_left(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http:
            answer = await http.post(
                PATH,
                json={
                    "token_ids": PROMPT_IDS,
                    "sampling_params": {"temperature": 0, "ignore_eos": True, "max_tokens": 40},
                },
            )
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 40


async def test_text_mode_shows_the_completions_text_beside_the_ids(server: LiveServer) -> None:
    """`output_mode: "text"` (vLLM's): each choice's text is what /v1/completions says for the
    same prompt ids; a stream's text deltas join into the whole answer's."""
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http:
            reference = await completion_ids(http)
            whole = await http.post(PATH, json=body(output_mode="text"))
            streamed = await http.post(
                PATH,
                json=body(output_mode="text", stream=True, stream_options={"include_usage": True}),
            )
    assert whole.status_code == 200, whole.text
    got = whole.json()
    (choice,) = got["choices"]
    expected = reference["choices"][0]
    assert got["output_mode"] == "text"
    assert (choice["text"], choice["token_ids"]) == (expected["text"], expected["token_ids"])
    assert list(choice) == [  # vLLM's field order
        *("index", "finish_reason", "stop_reason", "token_ids", "routed_experts"),
        *("sampling_mask", "weight_versions", "text", "logprobs"),
    ]
    chunks = sse_payloads(streamed.text)
    assert {chunk["output_mode"] for chunk in chunks} == {"text"}
    *text_chunks, usage = chunks
    assert "".join(c["choices"][0]["text"] for c in text_chunks) == choice["text"]
    assert [i for c in text_chunks for i in c["choices"][0]["token_ids"]] == choice["token_ids"]
    assert text_chunks[-1]["choices"][0]["finish_reason"] == choice["finish_reason"]
    assert usage["usage"]["completion_tokens"] == len(choice["token_ids"])


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"sampling": {"logprobs": 2}}, "sampling_params.logprobs"),
        ({"sampling": {"stop": ["x"]}}, "sampling_params.stop"),
        ({"sampling": {"temperature": 3}}, "sampling_params.temperature"),
        ({"sampling": {"n": 2}}, "sampling_params.n"),
        ({"output_mode": "derender"}, "output_mode"),
        ({"output_mode": "text", "sampling": {"detokenize": False}}, "sampling_params.detokenize"),
        ({"cache_salt": "salt"}, "cache_salt"),
        ({"priority": 1}, "priority"),
        ({"token_ids": []}, "token_ids"),
        ({"sampling": {"max_tokens": None, "min_tokens": 10**6}}, "sampling_params.min_tokens"),
        ({"token_ids": [1, -2]}, "token_ids"),
        ({"token_ids": [10**9]}, "token_ids"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
async def test_what_we_do_not_serve_is_a_400_naming_it(
    server: LiveServer, extra: dict[str, Any], param: str
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http:
            answer = await http.post(PATH, json=body(**extra))
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param


async def test_another_model_is_a_404(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http:
            answer = await http.post(PATH, json=body(model="nope"))
    assert answer.status_code == 404
