"""The request lifecycle matrix through the real server and the reference vLLM EngineCore:
router stop, client disconnect (HTTP/2 RST_STREAM, HTTP/1.1 close, before the first byte),
engine error and deadline, each with the client-visible ending it must have and the engine
left with no active request (read from the engine's own counters)."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import h11
import httpx
import pytest
import trio

from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.serving.http_listener import GRACEFUL_SHUTDOWN_S
from tests.e2e.h2_client import H2Client, open_h2_client
from tests.e2e.live_server import (
    REPLAY_HEAD,
    REPLAY_TEXT,
    STOP,
    LiveServer,
    chat_body,
    chat_outcome,
    live_server,
    parse_sse,
)

TEST_TIMEOUT_S: Final = 30.0
STEP_MS: Final = 5.0
IDLE_WITHIN_S: Final = 0.05  # the acceptance bound: no active engine request 50 ms after
CHAT: Final = "/v1/chat/completions"
# A stream that would run for 10 s if nobody aborted it.
ENDLESS: Final[dict[str, object]] = {"ignore_eos": True, "max_tokens": 2000}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(tmp_path, step_ms=STEP_MS) as running:
        yield running


def stop_token_position() -> int:
    """How many replayed tokens the engine must generate before the text contains STOP."""
    tokenizer = load_model_dir(demo_model_path()).tokenizer
    ids = tokenizer.encode(REPLAY_TEXT, add_special_tokens=False)
    return next(
        k
        for k in range(len(ids) + 1)
        if STOP in tokenizer.decode(ids[:k], skip_special_tokens=False)
    )


async def assert_engine_request_gone(server: LiveServer, before: dict[str, int]) -> float:
    """The engine has no active request within 50 ms, generated nothing after the abort, and
    stops generating (a request that was not aborted would keep adding tokens)."""
    idle_after = await server.seconds_until_idle()
    assert idle_after <= IDLE_WITHIN_S, f"engine still busy after {idle_after * 1000:.1f} ms"
    settled = await server.counters()
    await trio.sleep(4 * STEP_MS / 1000)
    later = await server.counters()
    assert later["tokens_generated"] == settled["tokens_generated"]
    assert later["tokens_after_abort"] == 0
    assert later["requests_aborted"] == before["requests_aborted"] + 1
    return idle_after


@pytest.mark.serial  # assert_engine_request_gone: IDLE_WITHIN_S of real time
async def test_router_stop_aborts_the_engine_within_one_step(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        before = dict(await server.counters())
        async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client:
            response = await client.post(CHAT, json=chat_body(stop=[STOP]))
        outcome = chat_outcome(parse_sse(response.content))
        assert outcome.texts == {0: REPLAY_HEAD}
        assert outcome.finishes == {0: "stop"}
        assert outcome.matched == {0: STOP}
        await assert_engine_request_gone(server, before)
        after = await server.counters()
        extra = after["tokens_generated"] - before["tokens_generated"] - stop_token_position()
        assert 0 <= extra <= 1, f"{extra} tokens generated after the stop (one step is 1)"

        # A stop in the very first tokens: no text at all, still a clean stop and an abort.
        before = dict(await server.counters())
        async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client:
            response = await client.post(CHAT, json=chat_body(stop=["Tok"]))
        outcome = chat_outcome(parse_sse(response.content))
        assert (outcome.texts, outcome.finishes) == ({0: ""}, {0: "stop"})
        await assert_engine_request_gone(server, before)


@pytest.mark.serial  # assert_engine_request_gone: IDLE_WITHIN_S of real time
async def test_http2_rst_stream_mid_stream_aborts_only_that_stream(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        before = dict(await server.counters())
        async with open_h2_client("127.0.0.1", server.port) as client:
            body = json.dumps(chat_body(**ENDLESS)).encode()
            stream_id = await client.post(CHAT, body, server.auth)
            response = await client.read_until(stream_id, body_bytes=1)
            assert response.status == 200
            assert (await server.counters())["requests_active"] == 1
            await client.reset(stream_id)
            await assert_engine_request_gone(server, before)

            # The connection is still good: the next stream on it runs to its end.
            body = json.dumps(chat_body(stop=[STOP])).encode()
            second = await client.read_until(await client.post(CHAT, body, server.auth))
            assert second.status == 200
            assert chat_outcome(parse_sse(bytes(second.body))).texts == {0: REPLAY_HEAD}


async def send_http1_request(stream: trio.SocketStream, server: LiveServer, body: bytes) -> None:
    request = h11.Request(
        method="POST",
        target=CHAT,
        headers=[
            ("host", "127.0.0.1"),
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
            *server.auth.items(),
        ],
    )
    connection = h11.Connection(h11.CLIENT)
    await stream.send_all(
        (connection.send(request) or b"")
        + (connection.send(h11.Data(data=body)) or b"")
        + (connection.send(h11.EndOfMessage()) or b"")
    )


@pytest.mark.serial  # assert_engine_request_gone: IDLE_WITHIN_S of real time
async def test_http1_disconnect_mid_stream_aborts_the_engine_request(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        before = dict(await server.counters())
        async with await trio.open_tcp_stream("127.0.0.1", server.port) as stream:
            await send_http1_request(stream, server, json.dumps(chat_body(**ENDLESS)).encode())
            received = b""
            while b"data: " not in received:
                received += await stream.receive_some(65536)
            assert received.startswith(b"HTTP/1.1 200 ")
        # The connection closed mid-body.
        await assert_engine_request_gone(server, before)


@pytest.mark.serial  # assert_engine_request_gone: IDLE_WITHIN_S of real time
async def test_disconnect_before_the_first_byte_aborts_the_engine_request(
    server: LiveServer,
) -> None:
    """A non-streaming request sends nothing until the end: the client leaves while waiting."""
    with trio.fail_after(TEST_TIMEOUT_S):
        before = dict(await server.counters())
        body = json.dumps(chat_body(stream=False, **ENDLESS)).encode()
        async with await trio.open_tcp_stream("127.0.0.1", server.port) as stream:
            await send_http1_request(stream, server, body)
            while (await server.counters())["requests_active"] == 0:  # noqa: ASYNC110 (polls the engine)
                await trio.sleep(STEP_MS / 1000)
        await assert_engine_request_gone(server, before)


async def test_engine_error_mid_stream_is_an_error_event_then_done(server: LiveServer) -> None:
    """SIGTERM makes the reference EngineCore finish in-flight requests with ABORT, as vLLM."""
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client,
            client.stream("POST", CHAT, json=chat_body(**ENDLESS)) as response,
        ):
            assert response.status_code == 200
            raw = bytearray()
            async for data in response.aiter_raw():
                if not raw:
                    await server.stop_engine(signal.SIGTERM)
                raw.extend(data)
        events = parse_sse(bytes(raw))
        assert events[-1] == "[DONE]"
        final = events[-2]
        assert isinstance(final, dict)
        # The engine's ABORT fails the stream; with migration on (docs/resilience.md §9) the
        # gateway may first look for another worker and find this one, the only one, dead.
        code = final["error"]["code"]  # type: ignore[index]
        assert code in ("worker_stream_failed", "engine_dead")
        assert all(isinstance(e, dict) and "choices" in e for e in events[:-2])


async def test_engine_gone_before_the_first_byte_is_a_503(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        await server.stop_engine(signal.SIGKILL)
        async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client:
            response = await client.post(CHAT, json=chat_body())
            assert response.status_code == 503, response.text
            code = response.json()["error"]["code"]
            assert code in ("engine_dead", "backend_unavailable")
            assert response.headers["x-error-code"] == code
            assert (await client.get("/health")).status_code == 503


async def test_a_request_the_engine_cannot_take_is_a_400_before_the_first_byte(
    tmp_path: Path,
) -> None:
    """The engine registered a 64-token context: the backend refuses the long prompt at open."""
    long_prompt = "word " * 100
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            live_server(tmp_path, engine_args=["--max-model-len", "64"]) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client,
        ):
            for stream in (True, False):
                body = chat_body(stream=stream, messages=[{"role": "user", "content": long_prompt}])
                response = await client.post(CHAT, json=body)
                assert response.status_code == 400, response.text
                assert response.headers["x-error-code"] == response.json()["error"]["code"]
            assert (await server.counters())["requests_added"] == 0


@pytest.mark.serial  # assert_engine_request_gone: IDLE_WITHIN_S of real time
async def test_deadline_before_and_after_the_first_byte(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            live_server(tmp_path, step_ms=20.0, request_timeout_s=0.3) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client,
        ):
            before = dict(await server.counters())
            response = await client.post(CHAT, json=chat_body(stream=False, **ENDLESS))
            assert response.status_code == 504
            assert response.json()["error"]["code"] == "request_timeout"
            assert response.headers["x-error-code"] == "request_timeout"
            await assert_engine_request_gone(server, before)

            before = dict(await server.counters())
            response = await client.post(CHAT, json=chat_body(**ENDLESS))
            assert response.status_code == 200
            events = parse_sse(response.content)
            assert events[-1] == "[DONE]"
            assert events[-2]["error"]["code"] == "request_timeout"  # type: ignore[index]
            assert len(events) > 3  # some tokens went out before the deadline
            await assert_engine_request_gone(server, before)


def all_tasks() -> set[trio.lowlevel.Task]:
    tasks: set[trio.lowlevel.Task] = set()
    root = trio.lowlevel.current_root_task()
    assert root is not None
    pending = [root]
    while pending:
        task = pending.pop()
        tasks.add(task)
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return tasks


async def test_shutdown_with_a_stream_in_flight_is_bounded_and_leaves_no_task(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        tasks_before = all_tasks()
        async with live_server(tmp_path, step_ms=STEP_MS) as server:
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            client = H2Client(stream, f"127.0.0.1:{server.port}")
            await client.start()
            body = json.dumps(chat_body(**ENDLESS)).encode()
            stream_id = await client.post(CHAT, body, server.auth)
            assert (await client.read_until(stream_id, body_bytes=1)).status == 200
            shutdown_started = trio.current_time()
        shutdown_s = trio.current_time() - shutdown_started
        assert shutdown_s < GRACEFUL_SHUTDOWN_S + 1.0, f"shutdown took {shutdown_s:.2f} s"
        # The drain (docs/resilience.md §4) ends the stream rather than cutting it: its engine
        # died with the server, so an error event, then [DONE] and END_STREAM.
        response = await client.read_until(stream_id)
        assert response.ended
        events = parse_sse(bytes(response.body))
        assert events[-1] == "[DONE]"
        assert isinstance(events[-2], dict)
        assert "error" in events[-2]
        await stream.aclose()
        assert all_tasks() == tasks_before  # every task the server started has ended
