"""The CORS wrapper's answers for vLLM's flag combinations (frontends/cors.py) and the path
prefix (frontends/root_path.py), around a small ASGI app that says what it was asked."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from smg_trio.frontends.cors import CorsApp, CorsPolicy
from smg_trio.frontends.http.asgi_types import DIRECT_CHUNKS_KEY, Message, Receive, Scope, Send
from smg_trio.frontends.root_path import RootPathApp, checked_root_path

ORIGIN = b"https://app.example"


async def echo_app(scope: Scope, receive: Receive, send: Send) -> None:
    """200 with the path, root path and whether a direct chunk writer was offered."""
    state = scope.get("state", {})
    seen = {
        "path": scope["path"],
        "root_path": scope.get("root_path", ""),
        "direct": DIRECT_CHUNKS_KEY in state,
    }
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x-app", b"1")]})
    await send({"type": "http.response.body", "body": json.dumps(seen).encode()})


async def call(
    app: Any, method: str, path: str, headers: dict[bytes, bytes]
) -> tuple[int, dict[bytes, bytes], Any]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "headers": list(headers.items()),
        "state": {DIRECT_CHUNKS_KEY: object()},
    }
    with trio.fail_after(5):
        await app(scope, receive, send)
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], dict(start["headers"]), json.loads(body)


async def test_without_origin_the_request_passes_through_untouched() -> None:
    app = CorsApp(echo_app, CorsPolicy(allowed_origins=("*",)))
    status, headers, seen = await call(app, "GET", "/v1/models", {})
    assert status == 200
    assert b"access-control-allow-origin" not in headers
    assert seen["direct"]  # the fast path stays for non-browser clients


async def test_any_origin_without_credentials_is_a_star() -> None:
    app = CorsApp(echo_app, CorsPolicy(allowed_origins=("*",)))
    status, headers, seen = await call(app, "GET", "/v1/models", {b"origin": ORIGIN})
    assert (status, headers[b"access-control-allow-origin"]) == (200, b"*")
    assert not seen["direct"]  # the headers go through ASGI send
    _, with_cookie, _ = await call(app, "GET", "/v1/models", {b"origin": ORIGIN, b"cookie": b"a=1"})
    assert with_cookie[b"access-control-allow-origin"] == ORIGIN


async def test_credentials_name_the_origin_in_the_preflight() -> None:
    app = CorsApp(echo_app, CorsPolicy(allowed_origins=("*",), allow_credentials=True))
    asked = {
        b"origin": ORIGIN,
        b"access-control-request-method": b"POST",
        b"access-control-request-headers": b"Authorization, X-Custom",
    }
    status, headers, _ = await call(app, "OPTIONS", "/v1/chat/completions", asked)
    assert status == 200
    assert headers[b"access-control-allow-origin"] == ORIGIN
    assert headers[b"access-control-allow-credentials"] == b"true"
    assert headers[b"access-control-allow-headers"] == b"Authorization, X-Custom"  # any header
    assert headers[b"access-control-max-age"] == b"600"


async def test_listed_headers_only() -> None:
    policy = CorsPolicy(allowed_origins=(ORIGIN.decode(),), allowed_headers=("Authorization",))
    app = CorsApp(echo_app, policy)
    base = {b"origin": ORIGIN, b"access-control-request-method": b"POST"}
    ok = {**base, b"access-control-request-headers": b"authorization, content-type"}
    status, headers, _ = await call(app, "OPTIONS", "/v1/completions", ok)
    assert status == 200
    assert headers[b"access-control-allow-headers"].startswith(b"accept, accept-language")
    bad = {**base, b"access-control-request-headers": b"x-other"}
    status, _, error = await call(app, "OPTIONS", "/v1/completions", bad)
    assert status == 400
    assert "headers" in error["error"]["message"]


async def test_a_refused_origin_gets_no_cors_headers_but_is_served() -> None:
    app = CorsApp(echo_app, CorsPolicy(allowed_origins=("https://other.example",)))
    status, headers, _ = await call(app, "GET", "/v1/models", {b"origin": ORIGIN})
    assert status == 200
    assert b"access-control-allow-origin" not in headers


@pytest.mark.parametrize(
    ("path", "routed"),
    [("/llm/v1/models", "/v1/models"), ("/v1/models", "/v1/models"), ("/llmx/v1", "/llmx/v1")],
)
async def test_the_prefix_is_taken_off_when_present(path: str, routed: str) -> None:
    _, _, seen = await call(RootPathApp(echo_app, "/llm"), "GET", path, {})
    assert (seen["path"], seen["root_path"]) == (routed, "/llm")


def test_a_root_path_loses_its_trailing_slash() -> None:
    assert checked_root_path("/llm/") == "/llm"
    assert checked_root_path("") == ""
