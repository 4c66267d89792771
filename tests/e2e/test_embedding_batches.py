"""A pooling request's N inputs are N engine requests in one nursery (docs/pooling.md §1), on
real sockets with the reference vLLM EngineCore: a client that leaves aborts every input still
running; one input the engine cannot take fails the request and the others are aborted; one
gateway serves a chat model and an embedding model side by side; /classify, /pooling, chat
`messages` and our WebSocket protocol carry them too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import httpx
import trio
import trio_websocket

from smg_trio.engines.pooling import pooled_values
from smg_trio.model.folder import demo_model_path, load_model_dir
from tests.e2e.live_server import MODEL, LiveServer, live_server
from tests.e2e.models_server import ServedFolder, models_server

TEST_TIMEOUT_S: Final = 40.0
HIDDEN: Final = 64  # the demo model's config has no hidden_size: the engine's default
EMBED: Final = {"runner": "pooling", "convert": "embed"}


def expected(ids: list[int], task: str = "embed") -> list[float]:
    return list(pooled_values(ids, task=task, hidden_size=HIDDEN, num_labels=2))


async def idle_within(server: LiveServer, limit_s: float) -> None:
    """The engine has nothing active or waiting within `limit_s`, and the gateway nothing in
    flight."""
    await server.seconds_until_idle(limit_s)
    assert server.backend.statistics().in_flight == 0


async def test_a_client_that_leaves_aborts_every_input(tmp_path: Path) -> None:
    # One input per step, a step a second: five of the six inputs are still queued or running
    # when the client gives up after 0.3 s.
    async with live_server(
        tmp_path, step_ms=1000.0, engine_args=("--max-batch", "1"), config_fields=EMBED
    ) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with httpx.AsyncClient(
                base_url=server.base_url, headers=server.auth, timeout=0.3
            ) as client:
                body = {"input": [[1, 2], [3], [4], [5], [6], [7]]}
                try:
                    await client.post("/v1/embeddings", json=body)
                    raise AssertionError("the answer came before the client left")
                except httpx.TimeoutException:
                    pass
            await idle_within(server, 3.0)  # the engine would need 5 s more to pool them all
            counters = await server.counters()
            assert counters["requests_added"] == 6
            assert counters["requests_aborted"] >= 4
            assert counters["requests_aborted"] + counters["requests_finished"] == 6


async def test_one_input_the_engine_cannot_take_fails_the_request(tmp_path: Path) -> None:
    # The engine's context (16) is below the folder's: the long input is refused for it.
    async with live_server(
        tmp_path, step_ms=200.0, engine_args=("--max-model-len", "16"), config_fields=EMBED
    ) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client:
                inputs = [[1, 2], [3, 4], [5] * 40, [6], [7]]
                reply = await client.post("/v1/embeddings", json={"input": inputs})
                assert reply.status_code == 400, reply.text
                assert reply.json()["error"]["param"] == "prompt"
                await idle_within(server, 2.0)
                # The engine is still fine: a good batch goes through.
                reply = await client.post("/v1/embeddings", json={"input": [[1, 2], [6]]})
                assert reply.status_code == 200, reply.text
                assert [d["embedding"] for d in reply.json()["data"]] == [
                    expected([1, 2]),
                    expected([6]),
                ]


async def test_classify_pooling_and_chat_messages(tmp_path: Path) -> None:
    tokenizer = load_model_dir(demo_model_path()).tokenizer
    async with live_server(
        tmp_path, config_fields={"runner": "pooling", "convert": "classify"}
    ) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client:
                reply = await client.post("/classify", json={"input": ["good", "bad"]})
                assert reply.status_code == 200, reply.text
                body = reply.json()
                assert body["id"].startswith("classify-")
                for datum, text in zip(body["data"], ["good", "bad"], strict=True):
                    probs = expected(
                        list(tokenizer.encode(text, add_special_tokens=True)), "classify"
                    )
                    assert datum["probs"] == probs
                    assert datum["num_classes"] == 2
                    assert datum["label"] == f"LABEL_{probs.index(max(probs))}"
                # /pooling takes the model's own task by default, and refuses another.
                reply = await client.post("/pooling", json={"input": [3, 4]})
                assert reply.json()["data"][0]["data"] == expected([3, 4], "classify")
                reply = await client.post("/pooling", json={"input": [3, 4], "task": "embed"})
                assert reply.status_code == 400
                assert reply.json()["error"]["param"] == "task"
                reply = await client.post("/v1/embeddings", json={"input": "hi"})
                assert reply.status_code == 404
                # A chat conversation, templated as chat would be (no generation prompt).
                messages = [{"role": "user", "content": "Classify me"}]
                tokenized = await client.post(
                    "/v1/tokenize", json={"messages": messages, "add_generation_prompt": False}
                )
                ids = tokenized.json()["tokens"]
                reply = await client.post("/classify", json={"messages": messages})
                assert reply.status_code == 200, reply.text
                assert reply.json()["data"][0]["probs"] == expected(ids, "classify")
                assert reply.json()["usage"]["prompt_tokens"] == len(ids)


async def test_a_chat_model_and_an_embedding_model_side_by_side(tmp_path: Path) -> None:
    models = [
        ServedFolder(("chat",), demo_model_path(), 1, "The chat model talks."),
        ServedFolder(("embed",), demo_model_path(), 1, None, runner="pooling", convert="embed"),
    ]
    async with models_server(tmp_path, models) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with httpx.AsyncClient(base_url=server.base_url, timeout=20) as client:
                chat = {"model": "chat", "messages": [{"role": "user", "content": "Hi"}]}
                reply = await client.post("/v1/chat/completions", json={**chat, "max_tokens": 4})
                assert reply.status_code == 200, reply.text
                assert reply.json()["choices"][0]["message"]["content"]
                reply = await client.post("/v1/embeddings", json={"model": "embed", "input": [9]})
                assert reply.status_code == 200, reply.text
                assert reply.json()["model"] == "embed"
                assert reply.json()["data"][0]["embedding"] == expected([9])
                # Each model refuses the other's paths, naming itself.
                reply = await client.post("/v1/embeddings", json={"model": "chat", "input": [9]})
                assert reply.status_code == 404
                assert "`chat` does not support /v1/embeddings" in reply.json()["error"]["message"]
                reply = await client.post("/v1/chat/completions", json={**chat, "model": "embed"})
                assert reply.status_code == 404
            assert server.requests_by_model() == {"chat": 1, "embed": 1}


async def test_the_websocket_protocol_carries_embeddings(tmp_path: Path) -> None:
    async with live_server(tmp_path, config_fields=EMBED) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            headers = [(name.encode(), value.encode()) for name, value in server.auth.items()]
            async with trio_websocket.open_websocket_url(
                f"ws://127.0.0.1:{server.port}/v1/ws", extra_headers=headers
            ) as socket:
                for stream_id, body in enumerate(
                    [{"model": MODEL, "input": [[1], [2, 3]]}, {"input": ""}]
                ):
                    await socket.send_message(
                        json.dumps(
                            {
                                "type": "request",
                                "id": stream_id,
                                "path": "/v1/embeddings",
                                "body": body,
                            }
                        )
                    )
                frames: dict[int, dict[str, Any]] = {}
                while len(frames) < 2:
                    frame = json.loads(await socket.get_message())
                    frames[frame["id"]] = frame
            answer = frames[0]
            assert answer["type"] == "response", answer
            embeddings = [d["embedding"] for d in answer["data"]["data"]]
            assert embeddings == [expected([1]), expected([2, 3])]
            assert frames[1]["type"] == "error"
            assert frames[1]["error"]["param"] == "input"
            assert frames[1]["error"]["message"] == "The decoder prompt cannot be empty"


TOKEN_KEYS: Final = """
[keys]
"sk-acme-0001" = "acme"

[tenants.acme]
tokens_per_minute = 60
"""


async def test_input_tokens_count_toward_the_tenants_tokens_per_minute(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(TOKEN_KEYS)
    async with live_server(
        tmp_path, api_key="sk-acme-0001", api_keys=keys, config_fields=EMBED
    ) as server:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client:
                batch = {"input": [[1] * 20, [2] * 20]}  # 40 prompt tokens
                first = await client.post("/v1/embeddings", json=batch)
                assert first.status_code == 200, first.text
                second = await client.post("/v1/embeddings", json=batch)
                assert second.status_code == 429, second.text
                assert second.json()["error"]["type"] == "tokens"
                metrics = (await client.get("/metrics")).text
    served = [
        line
        for line in metrics.splitlines()
        if line.startswith("smg_trio_requests_total") and 'endpoint="/v1/embeddings"' in line
    ]
    assert served, "the embeddings requests are counted under their endpoint"
