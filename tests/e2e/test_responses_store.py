"""The Responses API's store end to end (docs/client-apis.md §3.3): `previous_response_id`
continues a conversation, `GET`/`DELETE /v1/responses/{id}`, `store: false` keeps nothing, a
stored response outlives its gateway (a real SQLite file), and two gateways sharing the file
see each other's responses."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Final

import httpx
import openai
import pytest
import trio
from openai import OpenAI

from harness.ports import free_port
from tests.e2e.live_server import (
    MODEL,
    REPLAY_HEAD,
    STOP,
    LiveServer,
    live_server,
    openai_client,
)
from tests.e2e.test_cli import serve_command, serving_port
from tests.responses.store.postgres_server import postgres_server

TEST_TIMEOUT_S: Final = 30.0
FIRST: Final = "How does the gateway work?"
SECOND: Final = "And then?"


def two_turns(client: OpenAI) -> tuple[Any, Any, int]:
    """A streamed turn, a turn continuing it, and the prompt tokens of the same conversation
    as chat."""
    with client:
        # The first turn streamed: a stream is kept too, from its last event.
        with client.responses.stream(
            model=MODEL, input=FIRST, extra_body={"stop": [STOP]}
        ) as stream:
            first = stream.get_final_response()
        second = client.responses.create(
            model=MODEL,
            input=[{"role": "user", "content": [{"type": "input_text", "text": SECOND}]}],
            previous_response_id=first.id,
            extra_body={"stop": [STOP]},
        )
        chat = client.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "user", "content": FIRST},
                {"role": "assistant", "content": REPLAY_HEAD},
                {"role": "user", "content": SECOND},
            ],
            max_tokens=1,
        )
    assert chat.usage is not None
    return first, second, chat.usage.prompt_tokens


async def test_previous_response_id_continues_the_conversation(tmp_path: Path) -> None:
    async with live_server(tmp_path) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            first, second, chat_prompt = await trio.to_thread.run_sync(
                two_turns, openai_client(server)
            )
    assert second.previous_response_id == first.id
    assert second.output_text == REPLAY_HEAD
    # The second prompt is the whole conversation, templated as chat templates it.
    assert second.usage.input_tokens == chat_prompt
    assert first.usage.input_tokens < chat_prompt


def get(server: LiveServer, response_id: str, method: str = "GET") -> httpx.Response:
    return httpx.request(
        method, f"{server.base_url}/v1/responses/{response_id}", headers=server.auth, timeout=20
    )


def create(server: LiveServer, **fields: Any) -> Any:
    with openai_client(server) as client:
        return client.responses.create(
            model=MODEL, input=FIRST, extra_body={"stop": [STOP]}, **fields
        )


async def test_get_and_delete(tmp_path: Path) -> None:
    async with live_server(tmp_path) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            created = await trio.to_thread.run_sync(create, server)
            got = await trio.to_thread.run_sync(get, server, created.id)
            assert got.status_code == 200
            assert got.json() == created.model_dump(mode="json", exclude_unset=True)
            with openai_client(server) as client:
                retrieved = await trio.to_thread.run_sync(client.responses.retrieve, created.id)
                assert retrieved.output_text == REPLAY_HEAD
                await trio.to_thread.run_sync(client.responses.delete, created.id)
                with pytest.raises(openai.NotFoundError) as gone:
                    await trio.to_thread.run_sync(client.responses.retrieve, created.id)
            again = await trio.to_thread.run_sync(get, server, created.id, "DELETE")
            unknown = await trio.to_thread.run_sync(get, server, "resp_unknown")
            not_kept = await trio.to_thread.run_sync(lambda: create(server, store=False))
            missing = await trio.to_thread.run_sync(get, server, not_kept.id)
            with (
                openai_client(server) as client,
                pytest.raises(openai.NotFoundError) as unknown_previous,
            ):
                await trio.to_thread.run_sync(
                    lambda: client.responses.create(
                        model=MODEL, input=SECOND, previous_response_id="resp_nope"
                    )
                )
    assert gone.value.status_code == 404
    for answer, response_id in ((again, created.id), (unknown, "resp_unknown")):
        assert answer.status_code == 404
        assert answer.json() == {
            "error": {
                "message": f"Response with id '{response_id}' not found.",
                "type": "invalid_request_error",
                "param": "response_id",
                "code": "not_found",
            }
        }
    assert missing.status_code == 404
    assert unknown_previous.value.body["param"] == "previous_response_id"


async def test_a_stored_response_outlives_its_gateway(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'kept.sqlite3'}"
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    with trio.fail_after(TEST_TIMEOUT_S):
        async with live_server(first_dir, response_store=store) as server:
            created = await trio.to_thread.run_sync(create, server)
        # A new gateway on the same file (the first one is gone): the response is still there.
        async with live_server(second_dir, response_store=store, with_engine=False) as restarted:
            got = await trio.to_thread.run_sync(get, restarted, created.id)
    assert got.status_code == 200
    assert got.json()["output"][0]["content"][0]["text"] == REPLAY_HEAD


async def test_two_gateway_processes_share_the_file(tmp_path: Path) -> None:
    """This process's gateway writes; a `smg-trio serve` process on the same file reads and
    deletes; this one then finds it gone."""
    store = f"sqlite:///{tmp_path / 'shared.sqlite3'}"
    with trio.fail_after(TEST_TIMEOUT_S):
        async with live_server(tmp_path, response_store=store, api_key=None) as writer:
            command = serve_command(free_port(), "--response-store", store)
            process = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE)
            try:
                other = f"http://127.0.0.1:{await serving_port(process)}"
                fresh = await trio.to_thread.run_sync(create, writer)
                async with httpx.AsyncClient(base_url=other, timeout=20) as client:
                    seen = await client.get(f"/v1/responses/{fresh.id}")
                    deleted = await client.delete(f"/v1/responses/{fresh.id}")
                after = await trio.to_thread.run_sync(get, writer, fresh.id)
            finally:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
    assert seen.status_code == 200
    assert seen.json()["id"] == fresh.id
    assert seen.json()["output"][0]["content"][0]["text"] == REPLAY_HEAD
    assert deleted.json() == {"id": fresh.id, "object": "response", "deleted": True}
    assert after.status_code == 404


@pytest.mark.postgres
@pytest.mark.skipif(os.environ.get("SMG_TRIO_POSTGRES") != "1", reason="set SMG_TRIO_POSTGRES=1")
async def test_two_gateways_on_one_postgres(tmp_path: Path) -> None:
    """Replicas sharing a PostgreSQL store: a turn on one gateway continues on the other."""
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            postgres_server() as url,
            live_server(first_dir, response_store=url) as one,
            live_server(second_dir, response_store=url) as two,
        ):
            first = await trio.to_thread.run_sync(create, one)
            with openai_client(two) as client:
                second = await trio.to_thread.run_sync(
                    lambda: client.responses.create(
                        model=MODEL,
                        input=SECOND,
                        previous_response_id=first.id,
                        extra_body={"stop": [STOP]},
                    )
                )
            got = await trio.to_thread.run_sync(get, one, second.id)
    assert second.usage is not None
    assert first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert got.json()["previous_response_id"] == first.id
