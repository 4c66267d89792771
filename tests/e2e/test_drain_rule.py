"""The drain rule on every transport (docs/resilience.md §4), against a real gateway and the
reference vLLM engine: SSE over HTTP/1.1 and h2c, and WebSocket streams, some ending before the
drain timeout and some after it, some read slowly. Every stream ends with exactly one terminal:
SSE `[DONE]`, with at most one error event (`draining`) right before it; a WebSocket id exactly
one `done` or `draining` error frame. (Issue 33: a stream whose end was being written when the
drain cancelled it lost its terminal.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import httpx
import trio
import trio_websocket

from tests.e2e.live_server import chat_body, live_server, parse_sse

CHAT: Final = "/v1/chat/completions"
TEST_S: Final = 40.0
DRAIN_S: Final = 0.6
STEP_MS: Final = 4.0
PER_TRANSPORT: Final = 8
SLOW_READ_S: Final = 0.001  # a slow reader: the server's send buffers for it fill up


def tokens(index: int) -> int:
    """Lengths spread around the drain timeout (DRAIN_S at STEP_MS is ~150 steps)."""
    return 20 + (index * 37) % 260


def sse_verdict(raw: bytes) -> str:
    events = parse_sse(raw)
    errors: list[dict[str, Any]] = [
        event for event in events if isinstance(event, dict) and "error" in event
    ]
    if events[-1:] != ["[DONE]"] or events.count("[DONE]") != 1:
        return f"no single [DONE] at the end: {events[-3:]}"
    if not errors:
        return "finished"
    if len(errors) == 1 and events[-2] is errors[0] and errors[0]["error"]["code"] == "draining":
        return "drained"
    return f"bad errors: {errors}"


async def test_every_stream_on_every_transport_ends_with_one_terminal_through_a_drain(
    tmp_path: Path,
) -> None:
    verdicts: dict[str, str] = {}
    started = trio.Semaphore(0)
    resilience = {"drain_timeout_s": DRAIN_S}
    with trio.fail_after(TEST_S):
        async with live_server(
            tmp_path, step_ms=STEP_MS, api_key=None, resilience=resilience
        ) as server:
            base = server.base_url

            async def sse(shared: httpx.AsyncClient | None, name: str, index: int) -> None:
                body = chat_body(max_tokens=tokens(index), ignore_eos=True)
                raw = bytearray()
                async with (
                    httpx.AsyncClient(base_url=base, timeout=TEST_S) as own,  # HTTP/1.1
                    (shared or own).stream("POST", CHAT, json=body) as response,
                ):
                    assert response.status_code == 200
                    async for data in response.aiter_raw():
                        if not raw:
                            started.release()
                        raw.extend(data)
                        if index % 2:
                            await trio.sleep(SLOW_READ_S)
                verdicts[f"{name}{index}"] = sse_verdict(bytes(raw))

            async def websocket() -> None:
                url = f"ws://127.0.0.1:{server.port}/v1/ws"
                async with trio_websocket.open_websocket_url(url) as ws:
                    for index in range(PER_TRANSPORT):
                        body = chat_body(max_tokens=tokens(index), ignore_eos=True)
                        request = {"type": "request", "id": index, "path": CHAT, "body": body}
                        await ws.send_message(json.dumps(request))
                    seen: set[int] = set()
                    ends: dict[int, list[str]] = {}

                    def record(frame: dict[str, Any]) -> None:
                        if frame["id"] is not None and frame["id"] not in seen:
                            seen.add(frame["id"])
                            started.release()
                        if frame["type"] in ("done", "error", "response"):
                            code = frame.get("error", {}).get("code")
                            ends.setdefault(frame["id"], []).append(f"{frame['type']}:{code}")

                    while len(ends) < PER_TRANSPORT:
                        record(json.loads(await ws.get_message()))
                        await trio.sleep(SLOW_READ_S)  # slow: the socket's outbox fills
                    # The frames queued behind the last end (no id may end twice); then the
                    # socket is closed by us, before the server stops (trio-websocket leaks its
                    # socket when the server cuts it).
                    with trio.move_on_after(0.05):
                        while True:
                            record(json.loads(await ws.get_message()))
                for index in range(PER_TRANSPORT):
                    verdicts[f"ws{index}"] = f"terminals {ends.get(index)}"
                for index, frames in ends.items():
                    good = frames in (["done:None"], ["error:draining"])
                    verdicts[f"ws{index}"] = (  # (overwrites the default above)
                        ("finished" if frames[0] == "done:None" else "drained")
                        if good
                        else f"terminals {frames}"
                    )

            async with (
                httpx.AsyncClient(base_url=base, timeout=TEST_S, http1=False, http2=True) as h2c,
                trio.open_nursery() as nursery,
            ):
                # One h2 connection, open before the streams (else httpx races to open several).
                assert (await h2c.get("/v1/models")).http_version == "HTTP/2"
                for index in range(PER_TRANSPORT):
                    nursery.start_soon(sse, None, "http1-", index)
                    nursery.start_soon(sse, h2c, "h2c-", index)
                nursery.start_soon(websocket)
                for _ in range(3 * PER_TRANSPORT):
                    await started.acquire()
                server.stop.set()  # as SIGTERM: the drain starts
    bad = {
        name: verdict
        for name, verdict in verdicts.items()
        if verdict not in ("finished", "drained")
    }
    assert len(verdicts) == 3 * PER_TRANSPORT, verdicts
    assert bad == {}
    # Both sides of the deadline were exercised on every transport.
    for transport in ("http1-", "h2c-", "ws"):
        kinds = {v for name, v in verdicts.items() if name.startswith(transport)}
        assert kinds == {"finished", "drained"}, (transport, verdicts)
