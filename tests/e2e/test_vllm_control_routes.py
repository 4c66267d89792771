"""vLLM's control paths through the real server and the reference vLLM EngineCore
(docs/vllm-frontend.md §9, §10): `POST /inference/v1/abort_requests` (`--enable-scale-out`)
ends a running request with the finish reason `abort` and aborts its engine request; the
render paths are 501 with the flag and vLLM's 403 without it; `POST /collective_rpc` (dev mode)
runs a worker extension's method on the engine and answers as vLLM's does."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio

from tests.e2e.live_server import MODEL, LiveServer, live_server
from tests.e2e.worker_extension_echo import MODEL_NAME

TEST_TIMEOUT_S: Final = 30.0
GENERATE: Final = "/inference/v1/generate"
ABORT: Final = "/inference/v1/abort_requests"
EXTENSION: Final = "tests.e2e.worker_extension_echo.EchoExtension"
STEP_MS: Final = 20.0  # 300 tokens take 6 s: an abort lands long before the end
TEXT: Final = "Tokens stream from the engine until somebody aborts them. " * 20


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(
        tmp_path,
        step_ms=STEP_MS,
        replay_text=TEXT,
        engine_args=("--worker-extension-cls", EXTENSION),
        config_fields={"scale_out": True, "dev_mode": True},
    ) as running:
        yield running


def client(server: LiveServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.base_url, headers=server.auth, timeout=20)


def generate_body(**extra: Any) -> dict[str, Any]:
    sampling = {"max_tokens": 300, "temperature": 0, "ignore_eos": True}
    return {"model": MODEL, "token_ids": [1, 150, 590], "sampling_params": sampling, **extra}


async def until_active(server: LiveServer, count: int) -> None:
    """Until the engine has `count` requests generating (polled); the caller bounds it."""
    while True:
        if (await server.counters())["requests_active"] == count:
            return
        await trio.sleep(0.02)


async def test_an_abort_ends_a_stream_with_finish_abort_and_aborts_the_engine(
    server: LiveServer,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        before = await server.counters()
        chunks: list[dict[str, Any]] = []
        async with (
            client(server) as http,
            http.stream(
                "POST", GENERATE, json=generate_body(stream=True, request_id="r-9")
            ) as resp,
        ):
            assert resp.status_code == 200
            aborted = False
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunks.append(json.loads(line[6:]))
                if not aborted and chunks[-1]["choices"][0]["token_ids"]:
                    answer = await http.post(
                        ABORT, json={"request_ids": [chunks[-1]["request_id"]]}
                    )
                    assert (answer.status_code, answer.content) == (200, b"")
                    aborted = True
        await until_active(server, 0)
        after = await server.counters()
    assert {chunk["request_id"] for chunk in chunks} == {"generate-tokens-r-9"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "abort"
    generated = sum(len(chunk["choices"][0]["token_ids"]) for chunk in chunks)
    assert 0 < generated < 300
    assert after["requests_aborted"] == before["requests_aborted"] + 1


async def test_an_aborted_whole_answer_keeps_its_tokens(server: LiveServer) -> None:
    """A non-streaming request aborted mid-way answers 200 with what it had, as vLLM's."""
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http, trio.open_nursery() as nursery:
            answers: list[httpx.Response] = []

            async def whole() -> None:
                answers.append(await http.post(GENERATE, json=generate_body(request_id="w")))

            nursery.start_soon(whole)
            await until_active(server, 1)
            await trio.sleep(0.2)  # some tokens generated
            abort = await http.post(ABORT, json={"request_ids": "generate-tokens-w"})
            assert abort.status_code == 200
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    (choice,) = answer.json()["choices"]
    assert choice["finish_reason"] == "abort"
    assert 0 < len(choice["token_ids"]) < 300
    assert answer.json()["usage"]["completion_tokens"] == len(choice["token_ids"])


async def test_a_chat_completion_is_aborted_by_its_response_id(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 300,
            "stream": True,
        }
        finishes = []
        async with (
            client(server) as http,
            http.stream(
                "POST", "/v1/chat/completions", json=body, headers={"x-request-id": "c-1"}
            ) as resp,
        ):
            async for line in resp.aiter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    if chunk["choices"] and chunk["choices"][0]["finish_reason"]:
                        finishes.append(chunk["choices"][0]["finish_reason"])
                    elif chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                        await http.post(ABORT, json={"request_ids": ["chatcmpl-c-1"]})
    assert finishes == ["abort"]


async def test_abort_bodies_are_checked_as_vllms(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http:
            unknown = await http.post(ABORT, json={"request_ids": ["generate-tokens-unknown"]})
            assert unknown.status_code == 200
            for bad in (b"{}", b"[1]", b"not json", b'{"request_ids": [1]}'):
                answer = await http.post(ABORT, content=bad)
                assert answer.status_code == 400, bad
                assert answer.json()["error"]["message"]
            # The unauthenticated legacy path is vLLM's with --tokens-only only.
            legacy = await http.post("/abort_requests", json={"request_ids": ["x"]})
            assert legacy.status_code == 404
            assert (await http.post("/v1/chat/completions/render", json={})).status_code == 501
        async with httpx.AsyncClient(base_url=server.base_url) as keyless:
            refused = await keyless.post(ABORT, json={"request_ids": ["x"]})
            assert refused.status_code == 401  # under /inference: the API key guards it


async def test_collective_rpc_runs_the_worker_extension(server: LiveServer) -> None:
    """vLLM's tests/entrypoints/serve/dev/rpc/test_collective_rpc.py, against our engine."""
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url) as http:  # no key, as vLLM's
            name = await http.post("/collective_rpc", json={"method": "get_model_name"})
            assert (name.status_code, name.json()) == (200, {"results": [MODEL_NAME]})
            none = await http.post("/collective_rpc", json={"method": "return_none"})
            assert none.json() == {"results": [None]}
            echo = await http.post(
                "/collective_rpc",
                json={"method": "echo_args_kwargs", "args": ["a", "b"], "kwargs": {"k": "v"}},
            )
            assert echo.json() == {
                "results": [{"args": ["a", "b"], "kwargs": {"k": "v"}, "total_items": 3}]
            }
            flag = await http.post(
                "/collective_rpc", json={"method": "count_flags", "args": ["on"]}
            )
            assert flag.json() == {"results": ["True"]}  # vLLM's str() of a non-JSON value
            missing = await http.post("/collective_rpc", json={"method": "no_such_method"})
            assert missing.status_code == 500
            assert "Method 'no_such_method' is not implemented." in missing.text
            for bad in (
                {},
                {"method": 3},
                {"method": "x", "args": "a"},
                {"method": "x", "timeout": -1},
            ):
                assert (await http.post("/collective_rpc", json=bad)).status_code == 400, bad


async def test_without_the_flags_the_paths_answer_as_vllms(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with live_server(tmp_path) as running, client(running) as http:
            abort = await http.post(ABORT, json={"request_ids": ["x"]})
            assert abort.status_code == 403
            assert "--enable-scale-out" in abort.json()["error"]["message"]
            assert (await http.post("/v1/completions/render", json={})).status_code == 403
            assert (await http.post("/collective_rpc", json={"method": "m"})).status_code == 404
