"""The task group's `ClientDisconnect`: hypercorn's disconnect message fires it once, with the
registered callback told at once or at registration; every other message only passes."""

from __future__ import annotations

from typing import Any, Final

import pytest
import trio
from hypercorn.config import Config

from smg_trio.frontends.http.client_disconnect import (
    CLIENT_DISCONNECT_KEY,
    ClientDisconnect,
    DisconnectTaskGroup,
    ReadProgress,
    client_disconnect_of,
)

TEST_TIMEOUT_S: Final = 5.0


def test_fires_once_and_tells_a_callback_registered_before_or_after() -> None:
    told: list[str] = []
    early = ClientDisconnect()
    early.on_fire(lambda: told.append("early"))
    early.fire()
    early.fire()
    late = ClientDisconnect()
    late.fire()
    late.on_fire(lambda: told.append("late"))
    gone = ClientDisconnect()
    gone.on_fire(lambda: told.append("unregistered"))
    gone.on_fire(None)
    gone.fire()
    assert told == ["early", "late"]
    assert all(d.fired for d in (early, late, gone))


async def test_the_task_group_fires_it_when_hypercorn_queues_a_disconnect() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        received: list[dict[str, Any]] = []
        seen: list[ClientDisconnect] = []

        async def app_function(scope: Any, receive: Any, send: Any, *_: Any) -> None:
            seen.append(client_disconnect_of(scope))
            received.extend([await receive(), await receive()])

        async def send(message: Any) -> None:
            pass

        async with DisconnectTaskGroup() as group:
            scope: Any = {"type": "http"}
            app: Any = app_function  # hypercorn's AppWrapper: called with five arguments
            put = await group.spawn_app(app, Config(), scope, send)
            disconnect = scope[CLIENT_DISCONNECT_KEY]
            await put({"type": "http.request", "body": b"{}", "more_body": False})
            assert not disconnect.fired
            await put({"type": "http.disconnect"})
            assert disconnect.fired  # before the app read anything
        assert seen == [disconnect]
        assert [message["type"] for message in received] == ["http.request", "http.disconnect"]


def test_an_app_outside_our_server_is_refused_clearly() -> None:
    with pytest.raises(RuntimeError, match="smg_trio's HTTP server"):
        client_disconnect_of({"type": "http"})


async def test_settled_waits_only_while_the_reader_hands_hypercorn_its_bytes() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        read = ReadProgress()
        disconnect = ClientDisconnect(read)
        with trio.CancelScope() as scope:
            scope.cancel()
            await disconnect.settled()  # nothing being handled: no checkpoint at all
        settled_at: list[float] = []
        read.start()
        async with trio.open_nursery() as nursery:

            async def request() -> None:
                await disconnect.settled()
                settled_at.append(trio.current_time())

            nursery.start_soon(request)
            await trio.sleep(0.05)
            assert settled_at == []
            finished_at = trio.current_time()
            read.finish()
        assert settled_at[0] >= finished_at
        await ClientDisconnect().settled()  # with no reader (a test's server): at once


async def test_messages_are_queued_without_a_scheduling_round_while_there_is_room() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        received: list[dict[str, Any]] = []
        room = Config().max_app_queue_size

        async def app_function(scope: Any, receive: Any, send: Any, *_: Any) -> None:
            received.extend([await receive() for _ in range(room + 1)])

        async def send(message: Any) -> None:
            pass

        async with DisconnectTaskGroup() as group:
            app: Any = app_function
            scope: Any = {"type": "http"}
            put = await group.spawn_app(app, Config(), scope, send)
            with trio.CancelScope() as cancelled:
                cancelled.cancel()  # a checkpoint here would raise
                for n in range(room):
                    await put({"type": "http.request", "body": b"%d" % n, "more_body": True})
            # Full: the next one waits for the app, as hypercorn's own `send` did.
            await put({"type": "http.request", "body": b"", "more_body": False})
        assert len(received) == room + 1
