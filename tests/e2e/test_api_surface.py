"""The API surface around generation, through the real server and the reference vLLM
EngineCore: served model names and vLLM's 404 for any other `model`, `x-request-id` in and out
(HTTP/1.1 and h2, streams, bodies and errors; the engine id; log lines), and /v1/tokenize and
/v1/detokenize over HTTP and the WebSocket protocol."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio
import trio_websocket

from smg_trio.core.prepare import prepare_chat
from smg_trio.observability.request_ids import RequestIdLogFilter
from smg_trio.wire.openai_decode import decode_chat_request
from tests.e2e.live_server import API_KEY, MODEL, LiveServer, live_server

TEST_TIMEOUT_S: Final = 30.0
AUTH: Final = {"authorization": f"Bearer {API_KEY}"}
ALIASES: Final = ("tiny", "tiny-alias")
MESSAGES: Final = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "How does the gateway work?"},
]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(tmp_path, served_model_names=ALIASES) as running:
        yield running


def client(server: LiveServer, *, h2: bool = False) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=server.base_url, headers=AUTH, http1=not h2, http2=h2, timeout=20
    )


async def ws_exchange(server: LiveServer, frames: list[dict[str, Any]]) -> dict[Any, Any]:
    """Send request frames on one socket; each id's terminal frame (chunks are skipped)."""
    url = f"ws://127.0.0.1:{server.port}/v1/ws"
    ends: dict[Any, Any] = {}
    async with trio_websocket.open_websocket_url(
        url, extra_headers=[(b"authorization", f"Bearer {API_KEY}".encode())]
    ) as connection:
        for frame in frames:
            await connection.send_message(json.dumps(frame))
        while len(ends) < len(frames):
            reply = json.loads(await connection.get_message())
            if reply["type"] != "chunk":
                ends[reply["id"]] = reply
    return ends


# --- model -------------------------------------------------------------------------------


async def test_models_lists_every_served_name_with_vllms_fields(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http:
            listing = (await http.get("/v1/models")).json()
    assert listing["object"] == "list"
    assert [card["id"] for card in listing["data"]] == list(ALIASES)
    for card in listing["data"]:
        assert set(card) == {
            "id",
            "object",
            "created",
            "owned_by",
            "root",
            "parent",
            "max_model_len",
            "permission",
        }
        assert card["object"] == "model"
        assert card["root"].endswith(MODEL)  # the model folder
        assert card["parent"] is None
        assert isinstance(card["max_model_len"], int)
        (permission,) = card["permission"]
        assert permission["object"] == "model_permission"
        assert permission["id"].startswith("modelperm-")
        assert permission["allow_sampling"] is True


async def test_any_served_name_or_none_is_accepted_and_echoed(server: LiveServer) -> None:
    body: dict[str, Any] = {"prompt": "hi", "max_tokens": 3}
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http:
            for name in ALIASES:
                answer = (await http.post("/v1/completions", json={**body, "model": name})).json()
                assert answer["model"] == name
            answer = (await http.post("/v1/completions", json=body)).json()
            assert answer["model"] == ALIASES[0]  # none given: the first served name


UNKNOWN_MODEL_BODIES: Final[dict[str, dict[str, Any]]] = {
    "/v1/chat/completions": {"model": MODEL, "messages": MESSAGES},
    "/v1/completions": {"model": MODEL, "prompt": "hi"},
    "/generate": {"model": MODEL, "text": "hi"},
    "/v1/tokenize": {"model": MODEL, "prompt": "hi"},
    "/v1/detokenize": {"model": MODEL, "tokens": [1, 2]},
}


def assert_model_not_found(error: dict[str, Any]) -> None:
    # vLLM's message, type and param; OpenAI's code.
    assert error == {
        "message": f"The model `{MODEL}` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": "model_not_found",
    }


async def test_any_other_model_is_vllms_404_over_http_and_websocket(server: LiveServer) -> None:
    """The folder's own name is not served once aliases are given: every path refuses it."""
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http:
            for path, body in UNKNOWN_MODEL_BODIES.items():
                streams = (False,) if "token" in path else (False, True)
                for stream in streams:
                    response = await http.post(path, json={**body, "stream": stream})
                    assert response.status_code == 404, (path, response.text)
                    assert response.headers["x-error-code"] == "model_not_found"
                    assert_model_not_found(response.json()["error"])
        frames = [
            {"type": "request", "id": i, "path": path, "body": body}
            for i, (path, body) in enumerate(UNKNOWN_MODEL_BODIES.items())
        ]
        ends = await ws_exchange(server, frames)
    assert len(ends) == len(UNKNOWN_MODEL_BODIES)
    for end in ends.values():
        assert end["type"] == "error"
        assert_model_not_found(end["error"])


# --- request ids -------------------------------------------------------------------------


async def test_x_request_id_names_the_response_and_the_engine_request(
    server: LiveServer,
) -> None:
    chat = {"model": ALIASES[0], "messages": MESSAGES, "max_tokens": 200}
    with trio.fail_after(TEST_TIMEOUT_S):
        for h2 in (False, True):
            async with client(server, h2=h2) as http:
                ids = {"x-request-id": f"client-id-{h2}"}
                response = await http.post("/v1/chat/completions", json=chat, headers=ids)
                assert response.headers["x-request-id"] == f"client-id-{h2}"
                assert response.json()["id"] == f"chatcmpl-client-id-{h2}"

                # Streaming: the header is on the stream's head; the engine id starts with it.
                stream_ids = {"x-request-id": f"stream-id-{h2}"}
                async with http.stream(
                    "POST",
                    "/v1/chat/completions",
                    json={**chat, "stream": True},
                    headers=stream_ids,
                ) as streamed:
                    assert streamed.headers["x-request-id"] == f"stream-id-{h2}"
                    engine_ids: list[str] = []
                    lines: list[str] = []
                    async for line in streamed.aiter_lines():
                        if not engine_ids:
                            # The in-flight table is keyed by engine request id: the client's
                            # id plus a unique suffix.
                            engine_ids = list(server.backend._in_flight.requests)
                        if line:
                            lines.append(line)
                assert [i.startswith(f"stream-id-{h2}-") for i in engine_ids] == [True]
                first = json.loads(lines[0].removeprefix("data: "))
                assert first["id"] == f"chatcmpl-stream-id-{h2}"


async def test_x_request_id_is_generated_and_on_every_error(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http:
            response = await http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
            generated = response.headers["x-request-id"]
            assert len(generated) == 32
            assert response.json()["id"] == f"cmpl-{generated}"
            errors = [
                await http.post("/v1/completions", content=b"{", headers={"x-request-id": "e1"}),
                await http.get("/v1/nope", headers={"x-request-id": "e2"}),
                await http.post("/v1/tokenize", json={}, headers={"x-request-id": "e3"}),
            ]
            assert [(r.status_code, r.headers["x-request-id"]) for r in errors] == [
                (400, "e1"),
                (404, "e2"),
                (400, "e3"),
            ]
        async with httpx.AsyncClient(base_url=server.base_url) as no_key:
            refused = await no_key.get("/v1/models", headers={"x-request-id": "e4"})
        assert (refused.status_code, refused.headers["x-request-id"]) == (401, "e4")
        async with client(server) as http:
            bad = await http.post("/v1/completions", json={}, headers={"x-request-id": "a b"})
            assert bad.status_code == 400
            assert bad.json()["error"]["param"] == "x-request-id"
            assert len(bad.headers["x-request-id"]) == 32  # a fresh one: the client's is unusable


async def test_log_lines_of_a_request_carry_its_id(server: LiveServer) -> None:
    seen: list[tuple[str, str]] = []
    finished = trio.Event()

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append((record.name, record.__dict__["request_id"]))
            if record.name == "smg_trio.request.gateway" and "finished" in record.getMessage():
                finished.set()

    handler = Collect(level=logging.DEBUG)
    handler.addFilter(RequestIdLogFilter())
    logger = logging.getLogger("smg_trio")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with client(server) as http:
                body = {"prompt": "hi", "max_tokens": 2, "stream": True}
                await http.post("/v1/completions", json=body, headers={"x-request-id": "logged"})
            await finished.wait()  # the request's last line may follow its last byte
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
    gateway_lines = [rid for name, rid in seen if name == "smg_trio.request.gateway"]
    assert gateway_lines == ["logged", "logged"]  # started, finished


# --- tokenize / detokenize ---------------------------------------------------------------


async def test_tokenize_gives_the_ids_a_chat_request_sends(server: LiveServer) -> None:
    chat = {"model": ALIASES[1], "messages": MESSAGES}
    gateway = server.serving.gateway
    planned = prepare_chat(
        decode_chat_request(json.dumps(chat).encode()),
        gateway.prompt_model,
        request_id="x",
        now=dt.datetime.now(dt.UTC),
    ).prompt_ids
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http:
            tokenized = (await http.post("/v1/tokenize", json=chat)).json()
            answer = (await http.post("/v1/chat/completions", json=chat)).json()
            with_strs = (
                await http.post("/v1/tokenize", json={**chat, "return_token_strs": True})
            ).json()
    assert tokenized == {
        "count": len(planned),
        "max_model_len": gateway.prompt_model.context_length,
        "tokens": list(planned),
        "token_strs": None,
    }
    assert answer["usage"]["prompt_tokens"] == tokenized["count"]
    names = gateway.model.tokenizer
    assert with_strs["token_strs"] == [names.id_to_token(i) for i in planned]


async def test_tokenize_prompt_form_and_detokenize_round_trip(server: LiveServer) -> None:
    text = "Tokens stream from the engine"
    tokenizer = server.serving.gateway.model.tokenizer
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http:
            tokenized = (await http.post("/v1/tokenize", json={"prompt": text})).json()
            plain = (
                await http.post("/v1/tokenize", json={"prompt": text, "add_special_tokens": False})
            ).json()
            completion = (
                await http.post("/v1/completions", json={"prompt": text, "max_tokens": 1})
            ).json()
            back = await http.post("/v1/detokenize", json={"tokens": plain["tokens"]})
            outside = await http.post("/v1/detokenize", json={"tokens": [10**9]})
            neither = await http.post("/v1/tokenize", json={"model": ALIASES[0]})
            template = await http.post(
                "/v1/tokenize", json={"messages": MESSAGES, "chat_template": "{{ 1 }}"}
            )
    assert tokenized["tokens"] == tokenizer.encode(text, add_special_tokens=True)
    assert plain["tokens"] == tokenizer.encode(text, add_special_tokens=False)
    assert completion["usage"]["prompt_tokens"] == tokenized["count"]
    assert back.json() == {"prompt": text}
    assert (outside.status_code, outside.json()["error"]["param"]) == (400, "tokens")
    assert (neither.status_code, neither.json()["error"]["param"]) == (400, "prompt")
    # A known vLLM field the gateway cannot honour is refused, never ignored.
    assert (template.status_code, template.json()["error"]["param"]) == (400, "chat_template")


async def test_tokenize_and_detokenize_over_the_websocket(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with client(server) as http:
            over_http = (await http.post("/v1/tokenize", json={"messages": MESSAGES})).json()
        ends = await ws_exchange(
            server,
            [
                {
                    "type": "request",
                    "id": 1,
                    "path": "/v1/tokenize",
                    "body": {"messages": MESSAGES},
                },
                {
                    "type": "request",
                    "id": 2,
                    "path": "/v1/detokenize",
                    "body": {"tokens": over_http["tokens"]},
                },
            ],
        )
    request_id = ends[1].pop("request_id")  # every terminal frame names its gateway request
    assert len(request_id) == 32
    assert ends[1] == {"type": "response", "id": 1, "data": over_http}
    assert ends[2]["type"] == "response"
    assert "How does the gateway work?" in ends[2]["data"]["prompt"]
