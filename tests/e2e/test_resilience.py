"""Engine death, stalls, the drain and keep-alives, end to end (docs/resilience.md): the gateway
on loopback with reference vLLM engines as subprocesses that the tests `kill -9`, SIGSTOP and
SIGCONT, clients over HTTP (httpx) and WebSocket (trio-websocket). Periods are configured short;
the defaults are for production."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Final

import httpx
import pytest
import trio
import trio_websocket

from harness.ports import free_port
from smg_trio.backends.zmq_liveness import PROBE_PERIOD_S
from smg_trio.errors import BackendUnavailable
from smg_trio.neutral.runtime import Runtime
from tests.backends.grpc_reference import grpc_gateway, start_engine, stop_engine
from tests.e2e.live_server import (
    chat_body,
    engine_command,
    live_server,
    parse_sse,
)
from tests.e2e.test_cli import serve_command, serving_port

CHAT: Final = "/v1/chat/completions"
TEST_TIMEOUT_S: Final = 20.0
ERROR_EVENT_BOUND_S: Final = 1.0
HEALTH_BOUND_S: Final = 2.0
LONG: Final[dict[str, object]] = {"ignore_eos": True, "max_tokens": 1500}
# Every test here bounds in real time how fast a death, a stall or a drain is seen (1 s, 2 s, a
# probe period, a 200 ms keep-alive against a 600 ms step): run alone (docs/architecture.md §8.1).
# Under xdist at load average ~5, a kill -9 once took more than ERROR_EVENT_BOUND_S to show.
pytestmark = pytest.mark.serial


async def stream_until_end(
    client: httpx.AsyncClient, body: dict[str, object], first_byte: trio.Event | None = None
) -> tuple[list[object], float]:
    """A chat stream's events and the trio time its last bytes arrived."""
    raw = bytearray()
    async with client.stream("POST", CHAT, json=body) as response:
        assert response.status_code == 200, await response.aread()
        async for data in response.aiter_raw():
            raw.extend(data)
            if first_byte is not None:
                first_byte.set()
    return list(parse_sse(bytes(raw))), trio.current_time()


async def seconds_until(predicate_url: str, status: int, client: httpx.AsyncClient) -> float:
    start = trio.current_time()
    while (await client.get(predicate_url)).status_code != status:  # noqa: ASYNC110 (polls)
        await trio.sleep(0.02)
    return trio.current_time() - start


async def test_kill_9_mid_stream_ends_its_streams_within_1s_and_health_stays_200(
    tmp_path: Path,
) -> None:
    # Without migration (`--migration-limit 0`; with it, tests/e2e/test_migration.py).
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            live_server(
                tmp_path, workers=2, step_ms=5.0, resilience={"migration_limit": 0}
            ) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client,
        ):
            results: list[tuple[list[object], float]] = []
            started = [trio.Event() for _ in range(6)]

            async def one(index: int) -> None:
                results.append(await stream_until_end(client, chat_body(**LONG), started[index]))

            async with trio.open_nursery() as nursery:
                for index in range(6):  # round robin: three streams on each worker
                    nursery.start_soon(one, index)
                for event in started:
                    await event.wait()
                server.processes[0].kill()
                killed_at = trio.current_time()
                await trio.sleep(ERROR_EVENT_BOUND_S + 0.2)
                # The streams on the live worker run on; those on the dead one must be over.
                assert sum(1 for events, _ in results if _ends_in_error(events)) == 3
                assert (await client.get("/health")).status_code == 200  # one worker left
                nursery.cancel_scope.cancel()
            for events, ended_at in results:
                assert events[-1] == "[DONE]"
                assert ended_at - killed_at <= ERROR_EVENT_BOUND_S
            # New requests go to the live worker only.
            for _ in range(4):
                response = await client.post(CHAT, json=chat_body(stream=False, max_tokens=3))
                assert response.status_code == 200, response.text


def _ends_in_error(events: list[object]) -> bool:
    final = events[-2] if len(events) >= 2 else None
    return (
        events[-1:] == ["[DONE]"]
        and isinstance(final, dict)
        and final["error"]["code"] == "engine_dead"
    )


async def test_idle_kill_9_turns_health_503_within_2s_and_a_restarted_engine_is_taken_back(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            live_server(tmp_path) as server,
            httpx.AsyncClient(base_url=server.base_url) as client,
        ):
            assert (await client.get("/health")).status_code == 200
            server.processes[0].kill()
            assert await seconds_until("/health", 503, client) <= HEALTH_BOUND_S
            assert (await client.get("/liveness")).status_code == 200
            command = engine_command(
                server.serving.worker_addresses[0], tmp_path / "replay.txt", server.step_ms
            )
            server.processes.append(await trio.lowlevel.open_process(command))
            await seconds_until("/health", 200, client)


async def test_a_stopped_engine_is_excluded_then_taken_back_when_it_continues(
    tmp_path: Path,
) -> None:
    silence_s = 0.4
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            live_server(
                tmp_path, workers=2, step_ms=2.0, resilience={"engine_silence_s": silence_s}
            ) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client,
        ):
            stalled = server.processes[0]
            os.kill(stalled.pid, signal.SIGSTOP)
            try:
                # Idle, it is found by an unanswered probe: the probe goes out within two
                # periods of its last output, and it is dead after the silence.
                start = trio.current_time()
                while server.backend_of(0).statistics().ready:  # noqa: ASYNC110 (polls)
                    await trio.sleep(0.02)
                assert trio.current_time() - start <= 2 * PROBE_PERIOD_S + silence_s + 0.3
                body = chat_body(stream=False, max_tokens=3)
                for _ in range(6):  # all on the healthy worker, none waits for the stalled one
                    assert (await client.post(CHAT, json=body)).status_code == 200
            finally:
                os.kill(stalled.pid, signal.SIGCONT)
            start = trio.current_time()
            while not server.backend_of(0).statistics().ready:  # noqa: ASYNC110 (polls)
                await trio.sleep(0.02)
            assert trio.current_time() - start <= PROBE_PERIOD_S + 0.5
            counters = await server.backend_of(0).call_utility("smg_trio_counters")
            assert counters["requests_active"] == 0


async def test_drain_lets_streams_finish_then_ends_the_rest_with_an_error_then_done(
    tmp_path: Path,
) -> None:
    drain_s = 0.5
    resilience = {"drain_timeout_s": drain_s}
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            live_server(tmp_path, step_ms=5.0, api_key=None, resilience=resilience) as server,
            httpx.AsyncClient(base_url=server.base_url) as client,
        ):
            ws_url = f"ws://127.0.0.1:{server.port}/v1/ws"
            ws_frames: list[dict[str, object]] = []
            outcome: list[tuple[list[object], float]] = []
            first_byte = trio.Event()

            async def websocket_stream() -> None:
                async with trio_websocket.open_websocket_url(ws_url) as socket:
                    body = chat_body(**LONG)
                    request = {"type": "request", "id": 7, "path": CHAT, "body": body}
                    await socket.send_message(json.dumps(request))
                    while not ws_frames or ws_frames[-1]["type"] == "chunk":
                        ws_frames.append(json.loads(await socket.get_message()))

            async def sse_stream() -> None:
                outcome.append(await stream_until_end(client, chat_body(**LONG), first_byte))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(websocket_stream)
                nursery.start_soon(sse_stream)
                await first_byte.wait()
                while not ws_frames:  # noqa: ASYNC110 (both streams are running)
                    await trio.sleep(0.01)
                server.stop.set()
                drain_started = trio.current_time()
                await seconds_until("/health", 503, client)
                assert (await client.get("/readiness")).status_code == 503
                assert (await client.get("/liveness")).status_code == 200
                refused = await client.post(CHAT, json=chat_body())
                assert refused.status_code == 503
                assert refused.json()["error"]["code"] == "draining"
            assert trio.current_time() - drain_started >= drain_s  # they had their time
            assert server.backend.statistics().in_flight == 0
            try:
                while (await server.counters())["requests_active"]:  # noqa: ASYNC110 (polls)
                    await trio.sleep(0.01)
            except BackendUnavailable:
                # The gateway already finished its shutdown (a loaded machine): its backend is
                # closed, so the engine can only be asked through it while it is open. The
                # gateway's own table above says every engine request was aborted before that.
                pass
            events, _ = outcome[0]
            assert events[-1] == "[DONE]"
            assert events[-2]["error"]["code"] == "draining"  # type: ignore[index]
            terminal = [frame for frame in ws_frames if frame["type"] != "chunk"]
            assert terminal == [ws_frames[-1]]
            assert terminal[0]["error"]["code"] == "draining"  # type: ignore[index]


async def test_a_silent_stream_gets_keep_alives(tmp_path: Path) -> None:
    keepalive_s = 0.2
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            live_server(
                tmp_path, step_ms=600.0, api_key=None, resilience={"keepalive_s": keepalive_s}
            ) as server,
            httpx.AsyncClient(base_url=server.base_url) as client,
        ):
            # A 600 ms step: `first` waits that long between its tokens; `second`, sent once
            # `first` streams, waits for the next step for its first token (a "prefill").
            first_byte = trio.Event()
            raws: dict[str, bytes] = {}

            async def read(name: str, max_tokens: int) -> None:
                body = chat_body(max_tokens=max_tokens, ignore_eos=True)
                async with client.stream("POST", CHAT, json=body) as response:
                    raw = bytearray()
                    async for data in response.aiter_raw():
                        raw.extend(data)
                        first_byte.set()
                    raws[name] = bytes(raw)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read, "first", 2)
                await first_byte.wait()
                nursery.start_soon(read, "second", 1)
            keepalive = b": keep-alive\n\n"
            head, _, _ = raws["second"].partition(b"data: ")
            assert head.startswith(keepalive)  # the stream opened by a keep-alive
            assert raws["first"].startswith(b"data: ")
            assert keepalive in raws["first"]  # in the silence between its two tokens
            for raw in raws.values():
                assert parse_sse(raw.replace(keepalive, b""))[-1] == "[DONE]"
            ws_url = f"ws://127.0.0.1:{server.port}/v1/ws"
            async with trio_websocket.open_websocket_url(ws_url) as socket:
                body = chat_body(max_tokens=2, ignore_eos=True)
                await socket.send_message(
                    json.dumps({"type": "request", "id": 1, "path": CHAT, "body": body})
                )
                frames = [json.loads(await socket.get_message())]
                while frames[-1]["type"] not in ("done", "error"):
                    frames.append(json.loads(await socket.get_message()))
                assert frames[1] == {"type": "keepalive", "id": None}


async def test_sigterm_drains_a_second_signal_ends_the_drain_and_the_process_exits_0(
    tmp_path: Path,
) -> None:
    worker_port = free_port()
    command = serve_command(worker_port, "--drain-timeout-s", "30")
    gateway = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE)
    replay = tmp_path / "replay.txt"
    replay.write_text("Filler words follow. " * 20, encoding="utf-8")
    engine = await trio.lowlevel.open_process(
        engine_command(f"tcp://127.0.0.1:{worker_port}", replay, 5.0),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with trio.fail_after(TEST_TIMEOUT_S):
            port = await serving_port(gateway)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                await seconds_until("/health", 200, client)
                first_byte = trio.Event()
                async with trio.open_nursery() as nursery:
                    outcome: list[list[object]] = []

                    async def stream() -> None:
                        events, _ = await stream_until_end(client, chat_body(**LONG), first_byte)
                        outcome.append(events)

                    nursery.start_soon(stream)
                    await first_byte.wait()
                    gateway.send_signal(signal.SIGTERM)
                    await seconds_until("/health", 503, client)  # draining...
                    assert not outcome  # ...and the stream runs on
                    gateway.send_signal(signal.SIGINT)  # Ctrl-C: no more waiting
                    hurried_at = trio.current_time()
            assert trio.current_time() - hurried_at < ERROR_EVENT_BOUND_S
            assert outcome[0][-1] == "[DONE]"
            assert outcome[0][-2]["error"]["code"] == "draining"  # type: ignore[index]
            with trio.fail_after(5):
                assert await gateway.wait() == 0
    finally:
        for process in (gateway, engine):
            process.kill()
            await process.wait()


async def test_grpc_engine_kill_9_mid_stream_ends_the_stream_and_health_within_bounds(
    tmp_path: Path,
) -> None:
    with (tmp_path / "engine.log").open("wb") as log, trio.fail_after(TEST_TIMEOUT_S):
        process, port = await start_engine(Runtime.VLLM, log, step_ms=5.0)
        try:
            async with grpc_gateway(port) as serving:
                base = f"http://127.0.0.1:{serving.port}"
                async with httpx.AsyncClient(base_url=base) as client:
                    first_byte = trio.Event()
                    outcome: list[tuple[list[object], float]] = []

                    async def stream() -> None:
                        outcome.append(
                            await stream_until_end(client, chat_body(**LONG), first_byte)
                        )

                    async with trio.open_nursery() as streams:
                        streams.start_soon(stream)
                        await first_byte.wait()
                        process.kill()
                        killed_at = trio.current_time()
                    events, ended_at = outcome[0]
                    assert ended_at - killed_at <= ERROR_EVENT_BOUND_S
                    assert events[-1] == "[DONE]"
                    assert "error" in events[-2]  # type: ignore[operator]
                    assert await seconds_until("/health", 503, client) <= HEALTH_BOUND_S
        finally:
            await stop_engine(process)
