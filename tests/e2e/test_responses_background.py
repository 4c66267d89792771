"""Background responses and resumable streams through the unmodified openai SDK
(docs/client-apis.md §3.5): `create(background=True)` answers at once, the generation runs in
the gateway's nursery, `retrieve(id, stream=True, starting_after=k)` replays the events after k
then tails the live ones, `cancel` ends it `cancelled` with the engine request aborted."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Final

import httpx
import openai
import pytest
import trio

from harness.ports import free_port
from smg_trio.responses.runs import STALE_AFTER_S
from tests.e2e.live_server import (
    MODEL,
    REPLAY_HEAD,
    REPLAY_TEXT,
    STOP,
    LiveServer,
    engine_command,
    live_server,
    openai_client,
    websocket_request,
    write_replay,
)
from tests.e2e.test_cli import serve_command, serving_port
from tests.responses.store.postgres_server import postgres_server

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
            async with httpx.AsyncClient(base_url=server.base_url) as http:
                metrics = (await http.get("/metrics")).text
    for line in (
        'smg_trio_response_runs_ended_total{kind="background",status="completed"} 1.0',
        'smg_trio_response_runs{kind="background",status="in_progress"} 0.0',
        'smg_trio_response_runs{kind="background",status="queued"} 0.0',
    ):
        assert line in metrics.splitlines()
    # Two resumed streams: from this process's memory while it ran, from the log after.
    resumed = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("smg_trio_response_streams_total{") and 'start="resumed"' in line
    ]
    assert sum(resumed) == 2
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

                # Some events, then cancel while it generates (not delete: a 400).
                await trio.to_thread.run_sync(first_events)
                with pytest.raises(openai.BadRequestError) as deleting:
                    await trio.to_thread.run_sync(client.responses.delete, created.id)
                assert (await server.counters())["requests_active"] == 1
                cancelled = await trio.to_thread.run_sync(client.responses.cancel, created.id)
                idle_s = await server.seconds_until_idle()
                again = await trio.to_thread.run_sync(client.responses.cancel, created.id)
                tail = await trio.to_thread.run_sync(events_of, server, created.id, 5)
                await trio.to_thread.run_sync(client.responses.delete, created.id)
                with pytest.raises(openai.NotFoundError):
                    await trio.to_thread.run_sync(client.responses.retrieve, created.id)
                with pytest.raises(openai.NotFoundError):
                    await trio.to_thread.run_sync(events_of, server, created.id, None)
    assert deleting.value.body["param"] == "response_id"
    assert cancelled.status == "cancelled"
    assert again.status == "cancelled"
    assert idle_s < 2.0
    assert tail[-1].type == "response.cancelled"
    numbers = [event.sequence_number for event in tail]
    assert numbers == list(range(6, 6 + len(tail)))


async def test_retrieve_shows_the_output_so_far_and_a_cancel_keeps_it(tmp_path: Path) -> None:
    """Issue 45, with the openai SDK: `retrieve()` of a running background response shows the
    text streamed so far (it was `output == []`), and the `cancelled` object keeps every
    delta generated before the cancel, its message `incomplete`, as OpenAI's do."""
    async with live_server(tmp_path, step_ms=40.0) as server:
        with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
            created = await trio.to_thread.run_sync(
                lambda: client.responses.create(model=MODEL, input=PROMPT, background=True)
            )

            def deltas(count: int) -> str:
                seen: list[str] = []
                with client.responses.retrieve(created.id, stream=True) as stream:
                    for event in stream:
                        if event.type == "response.output_text.delta":
                            seen.append(event.delta)
                            if len(seen) == count:
                                break
                return "".join(seen)

            streamed = await trio.to_thread.run_sync(deltas, 8)
            running = await trio.to_thread.run_sync(client.responses.retrieve, created.id)
            cancelled = await trio.to_thread.run_sync(client.responses.cancel, created.id)
            stored = await trio.to_thread.run_sync(client.responses.retrieve, created.id)
            every = await trio.to_thread.run_sync(events_of, server, created.id, None)
    assert running.status == "in_progress"
    assert running.output_text.startswith(streamed)
    assert REPLAY_TEXT.startswith(running.output_text)
    assert running.output[0].status == "in_progress"
    generated = "".join(e.delta for e in every if e.type == "response.output_text.delta")
    assert cancelled.status == "cancelled"
    assert cancelled.output_text == generated
    assert generated.startswith(running.output_text)
    assert cancelled.output[0].status == "incomplete"
    assert stored.model_dump() == cancelled.model_dump()
    assert every[-1].type == "response.cancelled"
    (message,) = every[-1].response["output"]  # (an event the SDK has no type for: a dict)
    assert message["content"][0]["text"] == generated


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
                with_body = await http.post(f"/v1/responses/{sync.id}/cancel", json={"x": 1})
                answers = {
                    query: await http.get(f"/v1/responses/{sync.id}?{query}")
                    for query in (
                        "starting_after=1",
                        "stream=true&starting_after=-1",
                        "stream=maybe",
                        "include_obfuscation=true",
                        "include[]=reasoning.encrypted_content",
                        "stream=true",  # a response kept whole, without its events
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
        "stream=true": "stream",
    }
    assert {answer.status_code for answer in answers.values()} == {400}
    assert with_body.status_code == 400


async def test_another_process_streams_a_running_response(tmp_path: Path) -> None:
    """A `smg-trio serve` process on the same SQLite file streams a background response this
    process generates, while it is still generating."""
    store = f"sqlite:///{tmp_path / 'shared.sqlite3'}"
    async with live_server(tmp_path, step_ms=20.0, response_store=store) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            command = serve_command(free_port(), "--response-store", store)
            process = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE)
            try:
                other = f"http://127.0.0.1:{await serving_port(process)}"
                with openai_client(server) as client:
                    created = await trio.to_thread.run_sync(
                        lambda: client.responses.create(
                            model=MODEL, input=PROMPT, background=True, extra_body={"stop": [STOP]}
                        )
                    )
                running_when_first_read: list[bool] = []

                def read_other() -> list[Any]:
                    with openai.OpenAI(base_url=f"{other}/v1", api_key="-") as client:
                        events: list[Any] = []
                        stream = client.responses.retrieve(
                            created.id, stream=True, starting_after=0
                        )
                        with stream:
                            for event in stream:
                                if not events:
                                    running = server.serving.gateway.runs.local(created.id)
                                    running_when_first_read.append(running is not None)
                                events.append(event)
                        return events

                remote = await trio.to_thread.run_sync(read_other)
                local = await trio.to_thread.run_sync(events_of, server, created.id, 0)
            finally:
                process.terminate()
                with trio.CancelScope(shield=True):
                    await process.wait()
                    assert process.stderr is not None
                    await process.stderr.aclose()
    assert running_when_first_read == [True]
    assert [event.model_dump() for event in remote] == [event.model_dump() for event in local]
    assert [event.sequence_number for event in remote] == list(range(1, len(remote) + 1))
    assert remote[-1].type == "response.completed"
    assert remote[-1].response.output_text == REPLAY_HEAD


async def test_a_killed_gateway_keeps_completed_responses_and_ends_running_ones(
    tmp_path: Path,
) -> None:
    """A `smg-trio serve` process SIGKILLed with one background response done and one
    generating: a gateway on the same store still has the first, and ends the second
    `incomplete` once its process stopped refreshing it."""
    store = f"sqlite:///{tmp_path / 'kept.sqlite3'}"
    replay = write_replay(tmp_path, REPLAY_TEXT)
    worker_port = free_port()
    with trio.fail_after(TEST_TIMEOUT_S + STALE_AFTER_S):
        gateway = await trio.lowlevel.open_process(
            serve_command(worker_port, "--response-store", store), stderr=subprocess.PIPE
        )
        engine = await trio.lowlevel.open_process(
            engine_command(f"tcp://127.0.0.1:{worker_port}", replay, 40.0),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{await serving_port(gateway)}"
            async with httpx.AsyncClient(base_url=base, timeout=20) as http:
                while (await http.get("/health")).status_code != 200:  # noqa: ASYNC110 (polling a peer)
                    await trio.sleep(0.05)
                body = {"model": MODEL, "input": PROMPT, "background": True}
                done = (await http.post("/v1/responses", json={**body, "stop": [STOP]})).json()
                await status_reached(http, done["id"], "completed")
                running = (await http.post("/v1/responses", json=body)).json()
                await status_reached(http, running["id"], "in_progress")
            gateway.kill()
            await gateway.wait()
        finally:
            with trio.CancelScope(shield=True):
                for process in (gateway, engine):
                    process.kill()
                    await process.wait()
                assert gateway.stderr is not None
                await gateway.stderr.aclose()
        async with (
            live_server(tmp_path, response_store=store, with_engine=False) as restarted,
            httpx.AsyncClient(base_url=restarted.base_url, headers=restarted.auth) as http,
        ):
            kept = (await http.get(f"/v1/responses/{done['id']}")).json()
            ended = await status_reached(http, running["id"], "incomplete")
            answer = await http.get(f"/v1/responses/{running['id']}?stream=true")
    assert kept["status"] == "completed"
    assert kept["output"][0]["content"][0]["text"] == REPLAY_HEAD
    assert ended["status"] == "incomplete"
    assert ended["incomplete_details"] == {"reason": "gateway_shutdown"}
    name, data = answer.text.strip().split("\n\n")[-1].split("\n")
    assert name == "event: response.incomplete"
    assert json.loads(data.removeprefix("data: "))["response"]["status"] == "incomplete"


async def status_reached(http: httpx.AsyncClient, response_id: str, status: str) -> Any:
    """Poll `GET /v1/responses/{id}` until its status is `status` (the caller's deadline)."""
    while True:
        got = (await http.get(f"/v1/responses/{response_id}")).json()
        if got["status"] == status:
            return got
        await trio.sleep(0.05)


async def test_drain_waits_for_background_responses_then_ends_them_incomplete(
    tmp_path: Path,
) -> None:
    """SIGTERM's drain: a background response that ends within `--drain-timeout-s` completes;
    one still generating then ends `incomplete` (its engine request aborted as any request's);
    a new one is refused with 503 `draining`."""
    store = f"sqlite:///{tmp_path / 'drained.sqlite3'}"
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            live_server(
                tmp_path, step_ms=40.0, response_store=store, resilience={"drain_timeout_s": 3.0}
            ) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as http,
        ):
            body = {"model": MODEL, "input": PROMPT, "background": True}
            long = (await http.post("/v1/responses", json=body)).json()
            await status_reached(http, long["id"], "in_progress")
            short = (await http.post("/v1/responses", json={**body, "stop": [STOP]})).json()
            server.stop.set()  # as SIGTERM
            runs = server.serving.gateway.runs
            while not server.serving.gateway.live_requests.draining:  # noqa: ASYNC110 (a flag)
                await trio.sleep(0.01)
            # Asked once, while the long response still runs: the listener is open until the
            # drain ends. (Asked on every poll, a late ask could find the drain over, the
            # listener closed and the long run not yet removed: a refused connection, seen
            # under load.)
            assert runs.local(long["id"]) is not None
            refused = await http.post("/v1/responses", json=body)
            running = (long["id"], short["id"])
            while any(runs.local(i) is not None for i in running):  # noqa: ASYNC110 (polls)
                await trio.sleep(0.05)
        async with (
            live_server(tmp_path, response_store=store, with_engine=False) as restarted,
            httpx.AsyncClient(base_url=restarted.base_url, headers=restarted.auth) as http,
        ):
            completed = (await http.get(f"/v1/responses/{short['id']}")).json()
            drained = (await http.get(f"/v1/responses/{long['id']}")).json()
    assert completed["status"] == "completed"
    assert completed["output"][0]["content"][0]["text"] == REPLAY_HEAD
    assert drained["status"] == "incomplete"
    assert drained["incomplete_details"] == {"reason": "gateway_shutdown"}
    # What it generated before the drain cut it stays (issue 45), its message cut short.
    (message,) = drained["output"]
    assert message["status"] == "incomplete"
    assert message["content"][0]["text"]
    assert REPLAY_TEXT.startswith(message["content"][0]["text"])
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "draining"


async def read_then_drop(server: LiveServer, body: dict[str, Any], events: int) -> bytes:
    """POST a streamed `body`, read until `events` events arrived, then close the socket."""
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {server.api_key}\r\ncontent-length: {len(payload)}\r\n\r\n"
    ).encode()
    async with await trio.open_tcp_stream("127.0.0.1", server.port) as client:
        await client.send_all(head + payload)
        received = b""
        while received.count(b"\nevent: ") + received.startswith(b"event: ") < events:
            received += await client.receive_some(65536)
    return received


def response_id_in(received: bytes) -> str:
    return "resp_" + received.split(b'"id":"resp_', 1)[1].split(b'"', 1)[0].decode()


async def test_a_dropped_stored_stream_resumes_where_it_was(tmp_path: Path) -> None:
    async with live_server(tmp_path, step_ms=20.0) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            body = {"model": MODEL, "input": PROMPT, "stream": True, "stop": [STOP]}
            received = await read_then_drop(server, body, 4)
            response_id = response_id_in(received)
            rest = await trio.to_thread.run_sync(events_of, server, response_id, 3)
            whole = await trio.to_thread.run_sync(events_of, server, response_id, None)
    assert [event.sequence_number for event in rest] == list(range(4, len(whole)))
    assert [event.model_dump() for event in rest] == [event.model_dump() for event in whole[4:]]
    assert rest[-1].type == "response.completed"
    assert rest[-1].response.output_text == REPLAY_HEAD


async def test_a_stream_nobody_resumes_is_abandoned_after_the_grace(tmp_path: Path) -> None:
    async with live_server(tmp_path, step_ms=40.0, resilience={"resume_grace_s": 0.3}) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            body = {"model": MODEL, "input": PROMPT, "stream": True}
            received = await read_then_drop(server, body, 4)
            response_id = response_id_in(received)
            assert (await server.counters())["requests_active"] == 1
            idle_s = await server.seconds_until_idle(limit_s=5.0)
            async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as http:
                ended = await status_reached(http, response_id, "incomplete")
    assert 0.2 < idle_s < 3.0
    assert ended["incomplete_details"] == {"reason": "client_disconnected"}


async def test_an_unstored_stream_dropped_aborts_at_once(tmp_path: Path) -> None:
    async with live_server(tmp_path, step_ms=40.0) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            body = {"model": MODEL, "input": PROMPT, "stream": True, "store": False}
            received = await read_then_drop(server, body, 4)
            idle_s = await server.seconds_until_idle()
            async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as http:
                missing = await http.get(f"/v1/responses/{response_id_in(received)}")
    assert idle_s < 0.5
    assert missing.status_code == 404


@pytest.mark.postgres
@pytest.mark.skipif(os.environ.get("SMG_TRIO_POSTGRES") != "1", reason="set SMG_TRIO_POSTGRES=1")
async def test_replicas_on_one_postgres_stream_each_others_responses(tmp_path: Path) -> None:
    """A background response started on one gateway is streamed from another sharing the
    PostgreSQL store, while it is still generating, and cancelled from there."""
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            postgres_server() as url,
            live_server(first_dir, step_ms=20.0, response_store=url) as one,
            live_server(second_dir, response_store=url, with_engine=False) as two,
        ):
            with openai_client(one) as client:
                created = await trio.to_thread.run_sync(
                    lambda: client.responses.create(
                        model=MODEL, input=PROMPT, background=True, extra_body={"stop": [STOP]}
                    )
                )
                cancelled_run = await trio.to_thread.run_sync(
                    lambda: client.responses.create(model=MODEL, input=PROMPT, background=True)
                )
            running_when_first_read: list[bool] = []

            def read_two() -> list[Any]:
                events: list[Any] = []
                with (
                    openai_client(two) as client,
                    client.responses.retrieve(created.id, stream=True, starting_after=0) as stream,
                ):
                    for event in stream:
                        if not events:
                            running = one.serving.gateway.runs.local(created.id)
                            running_when_first_read.append(running is not None)
                        events.append(event)
                return events

            remote = await trio.to_thread.run_sync(read_two)
            local = await trio.to_thread.run_sync(events_of, one, created.id, 0)
            with openai_client(two) as client:
                cancelled = await trio.to_thread.run_sync(client.responses.cancel, cancelled_run.id)
            idle_s = await one.seconds_until_idle(limit_s=5.0)
    assert running_when_first_read == [True]
    assert [event.model_dump() for event in remote] == [event.model_dump() for event in local]
    assert remote[-1].type == "response.completed"
    assert cancelled.status == "cancelled"
    assert idle_s < 5.0


async def test_with_no_grace_a_followed_stream_still_completes(tmp_path: Path) -> None:
    """`--resume-grace-s 0`: a stream ends when its client leaves, never before (its creator
    follows it from the start, even while it waits for its first event)."""
    async with live_server(tmp_path, step_ms=5.0, resilience={"resume_grace_s": 0.0}) as server:
        with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:

            def stream_whole() -> Any:
                with client.responses.stream(
                    model=MODEL, input=PROMPT, extra_body={"stop": [STOP]}
                ) as stream:
                    return stream.get_final_response()

            final = await trio.to_thread.run_sync(stream_whole)
    assert final.status == "completed"
    assert final.output_text == REPLAY_HEAD


async def test_a_resumable_stream_refused_before_its_first_event_is_an_http_status(
    tmp_path: Path,
) -> None:
    """Admission's 429 reaches a stored stream's client as the status a stream without the
    log gets, not as a 200 whose first event is an error."""
    limits = {"max_concurrent_requests": 1, "max_queue": 0}
    async with live_server(tmp_path, step_ms=40.0, resilience=limits) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as http:
                body = {"model": MODEL, "input": PROMPT}
                busy = (await http.post("/v1/responses", json={**body, "background": True})).json()
                await status_reached(http, busy["id"], "in_progress")
                refused = await http.post("/v1/responses", json={**body, "stream": True})
                await http.post(f"/v1/responses/{busy['id']}/cancel")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"]


async def test_a_reused_request_id_replaces_an_ended_run_not_a_running_one(
    tmp_path: Path,
) -> None:
    async with live_server(tmp_path, step_ms=20.0) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            headers = {**server.auth, "x-request-id": "same-id"}
            async with httpx.AsyncClient(base_url=server.base_url, headers=headers) as http:
                body = {"model": MODEL, "input": PROMPT, "stream": True, "stop": [STOP]}
                first = await http.post("/v1/responses", json=body)
                second = await http.post("/v1/responses", json=body)
                background = {"model": MODEL, "input": PROMPT, "background": True}
                running = await http.post("/v1/responses", json=background)
                clash = await http.post("/v1/responses", json=background)
                await http.post("/v1/responses/resp_same-id/cancel")
    assert (first.status_code, second.status_code, running.status_code) == (200, 200, 200)
    assert second.text.count("event: response.completed") == 1
    assert clash.status_code == 409
    assert clash.json()["error"]["param"] == "x-request-id"


async def test_background_over_our_websocket_protocol_is_refused(tmp_path: Path) -> None:
    async with live_server(tmp_path) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            frames = await websocket_request(
                server, "/v1/responses", {"model": MODEL, "input": PROMPT, "background": True}
            )
    assert frames[-1]["type"] == "error"
    assert frames[-1]["error"]["param"] == "background"
