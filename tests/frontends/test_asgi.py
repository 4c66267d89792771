"""The ASGI app through the real server (hypercorn, HTTP/1.1, httpx): every bad input is an
OpenAI error JSON with the right status and `x-error-code`; auth, body limits, content types,
/health and /v1/models. No engine is attached, so nothing here depends on generation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import httpx
import pytest
import trio

from tests.e2e.live_server import API_KEY, MODEL, LiveServer, chat_body, live_server

TEST_TIMEOUT_S: Final = 20.0
LIMIT: Final = 64 * 1024
AUTH: Final = {"authorization": f"Bearer {API_KEY}"}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(tmp_path, with_engine=False, max_body_bytes=LIMIT) as running:
        yield running


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-error-code"] == code
    error: dict[str, object] = response.json()["error"]
    assert error["code"] == code
    assert isinstance(error["message"], str)
    assert error["message"]
    assert "Traceback" not in response.text
    return error


async def test_bad_requests_get_openai_error_json(server: LiveServer) -> None:
    chat = "/v1/chat/completions"
    valid = json.dumps(chat_body()).encode()
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            response = await client.post(chat, content=valid)
            assert_error(response, 401, "invalid_api_key")
            assert response.headers["www-authenticate"] == "Bearer"
            response = await client.post(
                chat, content=valid, headers={"authorization": "Bearer wrong"}
            )
            assert_error(response, 401, "invalid_api_key")
            response = await client.post(chat, content=valid, headers={"authorization": API_KEY})
            assert_error(response, 401, "invalid_api_key")  # the scheme is required
            assert_error(await client.get("/v1/nope"), 401, "invalid_api_key")  # auth first

            assert_error(await client.get("/v1/nope", headers=AUTH), 404, "not_found")
            response = await client.get(chat, headers=AUTH)
            assert_error(response, 405, "method_not_allowed")
            assert response.headers["allow"] == "POST"
            response = await client.post("/v1/models", headers=AUTH)
            assert_error(response, 405, "method_not_allowed")
            assert response.headers["allow"] == "GET, HEAD"
            assert_error(await client.get("/v1/ws", headers=AUTH), 426, "upgrade_required")

            for body in (b"{not json", b"", b"[]", b'"text"', b"\xff\xfe"):
                response = await client.post(chat, content=body, headers=AUTH)
                assert_error(response, 400, "invalid_request_parameters")
            response = await client.post(chat, json={"model": MODEL}, headers=AUTH)
            assert assert_error(response, 400, "invalid_request_parameters")["param"] == "messages"
            response = await client.post(
                "/v1/completions", json={"model": MODEL, "prompt": "x", "n": 0}, headers=AUTH
            )
            assert assert_error(response, 400, "invalid_request_parameters")["param"] == "n"


async def post_head(server: LiveServer, framing: str) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {API_KEY}\r\n{framing}\r\n\r\n"
    )
    await stream.send_all(head.encode())
    return stream


async def response_head(stream: trio.SocketStream) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head:
        data = await stream.receive_some(65536)
        assert data, head
        head += data
    return head


async def test_body_limit_is_enforced_without_reading_past_it(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        # Declared too large (16 GiB): refused from the header alone; no body byte is sent.
        async with await post_head(server, "Content-Length: 17179869184") as stream:
            head = await response_head(stream)
        assert head.startswith(b"HTTP/1.1 413 ")
        assert b"x-error-code: request_too_large" in head

        # Chunked, never finished: refused once the limit is passed.
        async with await post_head(server, "Transfer-Encoding: chunked") as stream:
            chunk = b"4000\r\n" + b" " * 0x4000 + b"\r\n"
            for _ in range(LIMIT // 0x4000 + 1):
                await stream.send_all(chunk)
            head = await response_head(stream)
        assert head.startswith(b"HTTP/1.1 413 ")

        # A body just at the limit is read (and then fails for want of an engine).
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            padded = json.dumps(chat_body()).encode().ljust(LIMIT, b" ")
            response = await client.post("/v1/chat/completions", content=padded, headers=AUTH)
            assert_error(response, 503, "backend_unavailable")
            response = await client.post(
                "/v1/chat/completions", content=padded + b" ", headers=AUTH
            )
            assert_error(response, 413, "request_too_large")


async def test_any_content_type_carrying_json_is_accepted(server: LiveServer) -> None:
    """No engine is ready, so a decoded request ends in 503: it got past decoding."""
    body = json.dumps(chat_body(stream=False)).encode()
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            for content_type in (
                "application/json",
                "application/json; charset=utf-8",
                "text/plain",
                "application/x-www-form-urlencoded",  # curl -d's default
                None,
            ):
                headers = dict(AUTH)
                if content_type is not None:
                    headers["content-type"] = content_type
                response = await client.post("/v1/chat/completions", content=body, headers=headers)
                assert_error(response, 503, "backend_unavailable")


async def test_health_needs_a_ready_worker_and_no_key(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            response = await client.get("/health")
            assert response.status_code == 503
            assert response.json()["status"] == "unavailable"
            assert (await client.head("/health")).status_code == 503


async def test_models_lists_the_served_model(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            assert_error(await client.get("/v1/models"), 401, "invalid_api_key")
            response = await client.get("/v1/models", headers=AUTH)
            assert response.status_code == 200
            listing = response.json()
            assert listing["object"] == "list"
            assert [card["id"] for card in listing["data"]] == [MODEL]
            assert listing["data"][0]["object"] == "model"


async def test_lifespan_and_shutdown_leave_nothing_listening(tmp_path: Path) -> None:
    """After the server's block ends, its HTTP port and its ZMQ handshake port are free."""
    with trio.fail_after(TEST_TIMEOUT_S):
        async with live_server(tmp_path, with_engine=False) as running:
            port = running.port
            handshake = running.serving.worker_addresses[0]
            async with httpx.AsyncClient(base_url=running.base_url) as client:
                assert (await client.get("/health")).status_code == 503
        with pytest.raises(OSError, match="connect"):
            await trio.open_tcp_stream("127.0.0.1", port)
        handshake_port = int(handshake.rsplit(":", 1)[1])
        listener = trio.socket.socket()
        await listener.bind(("127.0.0.1", handshake_port))  # free again
        listener.close()
