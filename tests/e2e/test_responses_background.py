"""Background responses and resumable streams through the unmodified openai SDK
(docs/client-apis.md §3.4): `create(background=True)` answers at once, the generation runs in
the gateway's nursery, `retrieve(id, stream=True, starting_after=k)` replays the events after k
then tails the live ones, `cancel` ends it `cancelled` with the engine request aborted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import httpx
import openai
import pytest
import trio

from tests.e2e.live_server import MODEL, REPLAY_HEAD, STOP, LiveServer, live_server, openai_client

TEST_TIMEOUT_S: Final = 30.0
PROMPT: Final = "How does the gateway work?"


def events_of(server: LiveServer, response_id: str, starting_after: int | None) -> list[Any]:
    with openai_client(server) as client:
        extra = {} if starting_after is None else {"starting_after": starting_after}
        stream = client.responses.retrieve(response_id, stream=True, **extra)
        with stream:
            return list(stream)


async def test_background_response_resumes_from_any_event(tmp_path: Path) -> None:
    async with live_server(tmp_path, step_ms=5.0) as server:
        with trio.fail_after(TEST_TIMEOUT_S):

            def create() -> Any:
                with openai_client(server) as client:
                    return client.responses.create(
                        model=MODEL, input=PROMPT, background=True, extra_body={"stop": [STOP]}
                    )

            created = await trio.to_thread.run_sync(create)
            assert created.status in ("queued", "in_progress")
            assert created.background is True
            whole = await trio.to_thread.run_sync(events_of, server, created.id, None)
            later = await trio.to_thread.run_sync(events_of, server, created.id, 5)
            with openai_client(server) as client:
                final = await trio.to_thread.run_sync(client.responses.retrieve, created.id)
    numbers = [event.sequence_number for event in whole]
    assert numbers == list(range(len(whole)))
    assert whole[0].type == "response.created"
    assert whole[-1].type == "response.completed"
    assert [event.sequence_number for event in later] == numbers[6:]
    assert [event.model_dump() for event in later] == [event.model_dump() for event in whole[6:]]
    assert final.status == "completed"
    assert final.output_text == REPLAY_HEAD
    assert whole[-1].response.output_text == REPLAY_HEAD


async def test_cancel_ends_the_response_and_aborts_the_engine(tmp_path: Path) -> None:
    async with live_server(tmp_path, step_ms=40.0) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            with openai_client(server) as client:
                created = await trio.to_thread.run_sync(
                    lambda: client.responses.create(model=MODEL, input=PROMPT, background=True)
                )

                def first_events() -> list[Any]:
                    seen = []
                    with client.responses.retrieve(created.id, stream=True) as stream:
                        for event in stream:
                            seen.append(event)
                            if len(seen) == 6:
                                break
                    return seen

                # Some events, then cancel while it generates.
                await trio.to_thread.run_sync(first_events)
                assert (await server.counters())["requests_active"] == 1
                cancelled = await trio.to_thread.run_sync(client.responses.cancel, created.id)
                idle_s = await server.seconds_until_idle()
                again = await trio.to_thread.run_sync(client.responses.cancel, created.id)
                tail = await trio.to_thread.run_sync(events_of, server, created.id, 5)
    assert cancelled.status == "cancelled"
    assert again.status == "cancelled"
    assert idle_s < 2.0
    assert tail[-1].type == "response.cancelled"
    numbers = [event.sequence_number for event in tail]
    assert numbers == list(range(6, 6 + len(tail)))


async def test_a_killed_client_never_kills_a_background_response(tmp_path: Path) -> None:
    async with live_server(tmp_path, step_ms=5.0) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            body = json.dumps(
                {
                    "model": MODEL,
                    "input": PROMPT,
                    "background": True,
                    "stream": True,
                    "stop": [STOP],
                }
            ).encode()
            head = (
                f"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                f"authorization: Bearer {server.api_key}\r\ncontent-length: {len(body)}\r\n\r\n"
            ).encode()
            # A client that reads the stream's first event and is gone (its socket closed).
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as client:
                await client.send_all(head + body)
                received = b""
                while b"response_id" not in received and b'"id":"resp_' not in received:
                    received += await client.receive_some(65536)
            response_id = received.split(b'"id":"', 1)[1].split(b'"', 1)[0].decode()
            async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as http:
                while True:
                    got = (await http.get(f"/v1/responses/{response_id}")).json()
                    if got["status"] == "completed":
                        break
                    await trio.sleep(0.05)
    assert got["output"][0]["content"][0]["text"] == REPLAY_HEAD


async def test_refusals_name_their_field(tmp_path: Path) -> None:
    async with live_server(tmp_path) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            with openai_client(server) as client:
                with pytest.raises(openai.BadRequestError) as not_stored:
                    await trio.to_thread.run_sync(
                        lambda: client.responses.create(
                            model=MODEL, input=PROMPT, background=True, store=False
                        )
                    )
                sync = await trio.to_thread.run_sync(
                    lambda: client.responses.create(
                        model=MODEL, input=PROMPT, extra_body={"stop": [STOP]}
                    )
                )
                with pytest.raises(openai.BadRequestError) as synchronous:
                    await trio.to_thread.run_sync(client.responses.cancel, sync.id)
                with pytest.raises(openai.NotFoundError):
                    await trio.to_thread.run_sync(client.responses.cancel, "resp_nope")
            async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as http:
                answers = {
                    query: await http.get(f"/v1/responses/{sync.id}?{query}")
                    for query in (
                        "starting_after=1",
                        "stream=true&starting_after=-1",
                        "stream=maybe",
                        "include_obfuscation=true",
                        "include[]=reasoning.encrypted_content",
                    )
                }
    assert not_stored.value.body["param"] == "background"
    assert synchronous.value.body["message"] == "Cannot cancel a synchronous response."
    params = {query: answer.json()["error"]["param"] for query, answer in answers.items()}
    assert params == {
        "starting_after=1": "starting_after",
        "stream=true&starting_after=-1": "starting_after",
        "stream=maybe": "stream",
        "include_obfuscation=true": "include_obfuscation",
        "include[]=reasoning.encrypted_content": "include[]",
    }
    assert {answer.status_code for answer in answers.values()} == {400}
