"""Real clients against the real server and the reference vLLM EngineCore: the openai SDK
(streaming and not, stop strings spanning tokens, n=2, include_usage), httpx over HTTP/1.1 and
h2c, curl with prior knowledge, the WebSocket client, and TLS with ALPN h2. The same request
gives the same text and finish fields over every transport."""

from __future__ import annotations

import json
import shlex
import shutil
import ssl
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio
import trustme
from openai import OpenAI
from openai.types import CompletionUsage

from smg_trio.client import open_gateway_client
from smg_trio.serving.demo import instructions
from tests.e2e.live_server import (
    API_KEY,
    MODEL,
    REPLAY_HEAD,
    STOP,
    ChatOutcome,
    LiveServer,
    chat_body,
    chat_outcome,
    live_server,
    openai_client,
    parse_sse,
)

TEST_TIMEOUT_S: Final = 30.0
CHAT: Final = "/v1/chat/completions"
# Spans five tokens of the replayed text: ' scan', 'ner', ',', ' t', 'o'.
SPANNING_STOP: Final = "scanner, to"
TEXT_BEFORE_SPANNING_STOP: Final = "Tokens stream from the engine, through the stop "


def stream_chat(client: OpenAI, stop: str) -> tuple[str, list[str], CompletionUsage | None]:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "How does it work?"}],
        stream=True,
        stop=[stop],
        stream_options={"include_usage": True},
    )
    text, usage = "", None
    finishes: list[str] = []
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            if choice.finish_reason is not None:
                finishes.append(choice.finish_reason)
        if chunk.usage is not None:
            assert chunk.choices == []  # the usage chunk comes alone, last
            usage = chunk.usage
    return text, finishes, usage


async def test_openai_sdk_streaming_chat_with_stops_that_span_tokens(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        for stop, expected in ((STOP, REPLAY_HEAD), (SPANNING_STOP, TEXT_BEFORE_SPANNING_STOP)):
            text, finishes, usage = await trio.to_thread.run_sync(stream_chat, client, stop)
            assert text == expected
            assert stop not in text
            assert finishes == ["stop"]
            assert usage is not None
            assert usage.prompt_tokens > 0
            assert usage.completion_tokens > 0
            assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def chat_n2(client: OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "How does it work?"}],
        stop=[STOP],
        n=2,
    )
    assert [c.index for c in completion.choices] == [0, 1]
    for answer in completion.choices:
        assert answer.message.content == REPLAY_HEAD
        assert answer.finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.completion_tokens > 0

    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "How does it work?"}],
        stop=[STOP],
        n=2,
        stream=True,
    )
    texts = {0: "", 1: ""}
    finishes: dict[int, str] = {}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason is not None:
                finishes[choice.index] = choice.finish_reason
    assert texts == {0: REPLAY_HEAD, 1: REPLAY_HEAD}
    assert finishes == {0: "stop", 1: "stop"}


async def test_openai_sdk_non_streaming_chat_and_n2(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(chat_n2, client)


def completions(client: OpenAI) -> None:
    completion = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=4)
    assert completion.choices[0].text == "Tokens stream"
    assert completion.choices[0].finish_reason == "length"
    stream = client.completions.create(
        model=MODEL, prompt="Once upon a time", stop=[STOP], stream=True, max_tokens=100
    )
    text = ""
    finish = None
    for chunk in stream:
        text += chunk.choices[0].text if chunk.choices else ""
        finish = (chunk.choices[0].finish_reason if chunk.choices else None) or finish
    assert (text, finish) == (REPLAY_HEAD, "stop")


async def test_openai_sdk_completions_stream_and_length(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(completions, client)


def open_and_close_a_stream(client: OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Go on forever."}],
        stream=True,
        max_tokens=2000,
        extra_body={"ignore_eos": True},
    )
    for _ in stream:
        break
    stream.close()


@pytest.mark.serial
async def test_openai_sdk_closing_a_stream_aborts_the_engine_request(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(open_and_close_a_stream, client)
        assert await server.seconds_until_idle() <= 0.05


async def test_same_answer_over_http1_h2c_curl_and_websocket(tmp_path: Path) -> None:
    body = chat_body(stop=[STOP], stream_options={"include_usage": True})
    outcomes: dict[str, ChatOutcome] = {}
    with trio.fail_after(TEST_TIMEOUT_S):
        async with live_server(tmp_path, api_key=None) as server:
            async with httpx.AsyncClient(base_url=server.base_url) as client:
                response = await client.post(CHAT, json=body)
                assert response.http_version == "HTTP/1.1"
                outcomes["http/1.1"] = chat_outcome(parse_sse(response.content))
            async with httpx.AsyncClient(
                base_url=server.base_url, http1=False, http2=True
            ) as client:
                response = await client.post(CHAT, json=body)
                assert response.http_version == "HTTP/2"
                assert response.headers["content-type"].startswith("text/event-stream")
                outcomes["h2c"] = chat_outcome(parse_sse(response.content))
            if shutil.which("curl") is not None:
                outcomes["curl h2c"] = await curl_outcome(
                    ["--http2-prior-knowledge", f"{server.base_url}{CHAT}"], body
                )
            outcomes["websocket"] = await websocket_outcome(server, body)
    expected = outcomes["http/1.1"]
    assert expected.texts == {0: REPLAY_HEAD}
    assert expected.finishes == {0: "stop"}
    for transport, outcome in outcomes.items():
        assert (outcome.texts, outcome.finishes, outcome.usage) == (
            expected.texts,
            expected.finishes,
            expected.usage,
        ), transport


async def curl_outcome(arguments: list[str], body: dict[str, Any]) -> ChatOutcome:
    result = await trio.run_process(
        [
            *("curl", "-sS", "-N", "--fail-with-body", "-H", "content-type: application/json"),
            *("-d", json.dumps(body), *arguments),
        ],
        capture_stdout=True,
    )
    return chat_outcome(parse_sse(result.stdout))


async def websocket_outcome(server: LiveServer, body: dict[str, Any]) -> ChatOutcome:
    url = f"ws://127.0.0.1:{server.port}/v1/ws"
    async with open_gateway_client(url) as client, client.stream(CHAT, body) as stream:
        events: list[dict[str, object] | str] = [chunk async for chunk in stream]
    return chat_outcome([*events, "[DONE]"])


async def test_the_demo_websocket_example_stops_like_the_curl_one(tmp_path: Path) -> None:
    """The WebSocket command `smg-trio demo` prints, run as printed: it asks for the same stop
    string as the curl example, so its text ends before STOP with finish "stop"."""
    with trio.fail_after(TEST_TIMEOUT_S):
        async with live_server(tmp_path, api_key=None) as server:
            ws_url = f"ws://127.0.0.1:{server.port}/v1/ws"
            printed = instructions(server.base_url, ws_url, MODEL)
            (line,) = [row.strip() for row in printed.splitlines() if "-m smg_trio.client" in row]
            assert line.endswith(f"--stop {STOP}")
            result = await trio.run_process(
                shlex.split(line), capture_stdout=True, capture_stderr=True, check=False
            )
    out = result.stdout.decode()
    assert result.returncode == 0, out + result.stderr.decode()
    text, _, status = out.partition("\n[finish: ")
    assert text == REPLAY_HEAD
    assert status.startswith("stop;")


async def test_websocket_needs_the_api_key(server: LiveServer) -> None:
    import trio_websocket

    url = f"ws://127.0.0.1:{server.port}/v1/ws"
    with trio.fail_after(TEST_TIMEOUT_S):
        # Raw handshakes (trio-websocket leaks its socket when a handshake is rejected).
        assert await websocket_handshake_status(server, None) == 403
        assert await websocket_handshake_status(server, "Bearer wrong") == 403
        assert await websocket_handshake_status(server, f"Bearer {API_KEY}") == 101
        async with trio_websocket.open_websocket_url(
            url, extra_headers=[(b"authorization", f"Bearer {API_KEY}".encode())]
        ) as connection:
            request = {"type": "request", "id": 1, "path": CHAT, "body": chat_body(stop=[STOP])}
            await connection.send_message(json.dumps(request))
            events: list[dict[str, object] | str] = []
            while True:
                frame = json.loads(await connection.get_message())
                if frame["type"] != "chunk":
                    assert frame["type"] == "done", frame
                    break
                events.append(frame["data"])
        assert chat_outcome([*events, "[DONE]"]).texts == {0: REPLAY_HEAD}


async def websocket_handshake_status(server: LiveServer, authorization: str | None) -> int:
    lines = [
        "GET /v1/ws HTTP/1.1",
        f"Host: 127.0.0.1:{server.port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
    ]
    if authorization is not None:
        lines.append(f"Authorization: {authorization}")
    async with await trio.open_tcp_stream("127.0.0.1", server.port) as stream:
        await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n" not in head:
            head += await stream.receive_some(4096)
    return int(head.split(b" ", 2)[1])


async def test_generate_endpoint_stream_and_not_over_h2c(server: LiveServer) -> None:
    body = {"text": "hi", "sampling_params": {"stop": [STOP], "max_new_tokens": 100}}
    finish = {"type": "stop", "matched": STOP}
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(
            base_url=server.base_url, headers=server.auth, http1=False, http2=True
        ) as client:
            response = await client.post("/generate", json=body)
            assert response.status_code == 200
            answer = response.json()
            assert answer["text"] == REPLAY_HEAD
            assert answer["meta_info"]["finish_reason"] == finish
            assert len(answer["output_ids"]) == answer["meta_info"]["completion_tokens"]

            response = await client.post("/generate", json={**body, "stream": True})
            events = parse_sse(response.content)
            assert events[-1] == "[DONE]"
            last = events[-2]
            assert isinstance(last, dict)
            assert last["text"] == REPLAY_HEAD  # SGLang streams the cumulative text
            assert last["meta_info"]["finish_reason"] == finish  # type: ignore[index]


async def test_requests_go_round_robin_over_several_workers(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            live_server(tmp_path, workers=2) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client,
        ):
            assert len(set(server.serving.worker_addresses)) == 2
            for _ in range(4):
                response = await client.post(CHAT, json=chat_body(stream=False, stop=[STOP]))
                assert response.json()["choices"][0]["message"]["content"] == REPLAY_HEAD
            for worker in (0, 1):
                counters = await server.backend_of(worker).call_utility("smg_trio_counters")
                assert counters["requests_added"] == 2


async def test_health_is_ok_once_the_engine_is_ready(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            response = await client.get("/health")
            assert (response.status_code, response.json()) == (200, {"status": "ok"})


async def test_tls_with_alpn_h2_gives_the_same_text(tmp_path: Path) -> None:
    authority = trustme.CA()
    certificate = authority.issue_cert("127.0.0.1", "localhost")
    certfile, keyfile, cafile = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    certificate.private_key_pem.write_to_path(str(keyfile))
    certificate.cert_chain_pems[0].write_to_path(str(certfile))
    authority.cert_pem.write_to_path(str(cafile))
    trusted = ssl.create_default_context()
    authority.configure_trust(trusted)
    body = chat_body(stop=[STOP])
    with trio.fail_after(TEST_TIMEOUT_S):
        async with live_server(tmp_path, api_key=None, tls=(certfile, keyfile)) as server:
            assert server.base_url.startswith("https://")
            for http2, version in ((True, "HTTP/2"), (False, "HTTP/1.1")):
                async with httpx.AsyncClient(
                    base_url=server.base_url, http2=http2, verify=trusted
                ) as client:
                    response = await client.post(CHAT, json=body)
                    assert response.http_version == version
                    outcome = chat_outcome(parse_sse(response.content))
                    assert (outcome.texts, outcome.finishes) == ({0: REPLAY_HEAD}, {0: "stop"})
            if shutil.which("curl") is not None:
                outcome = await curl_outcome(
                    ["--http2", "--cacert", str(cafile), f"{server.base_url}{CHAT}"], body
                )
                assert (outcome.texts, outcome.finishes) == ({0: REPLAY_HEAD}, {0: "stop"})
