"""POST /score, /v1/score, /rerank, /v1/rerank and /v2/rerank on real sockets (docs/pooling.md
§7): the gateway with `runner = "pooling"` in front of the reference vLLM EngineCore over ZMQ
and of the reference vLLM gRPC engine, whose pooler derives each vector from the prompt ids
(engines/pooling.py). Every expected score is the cosine of those vectors computed here in
float32 with numpy, as torch computes it for vLLM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import httpx
import numpy as np
import pytest
import trio
import trio_websocket

from smg_trio.engines.pooling import pooled_values
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.runtime import Runtime
from tests.e2e.live_server import MODEL, LiveServer, live_server
from tests.e2e.test_grpc_embeddings import embedding_gateway

TEST_TIMEOUT_S: Final = 40.0
TOKENIZER: Final = load_model_dir(demo_model_path()).tokenizer
EMBED: Final = {"runner": "pooling", "convert": "embed"}
QUERY: Final = "what pools a prompt"
DOCUMENTS: Final = ["an embedding model", "a chat model", "pooling models", "trio nurseries"]


def ids_of(text: str) -> list[int]:
    return list(TOKENIZER.encode(text, add_special_tokens=True))


def vector(text: str) -> np.ndarray[Any, np.dtype[np.float32]]:
    values = pooled_values(ids_of(text), task="embed", hidden_size=64, num_labels=2)
    return np.asarray(values, dtype=np.float32)


def expected_score(a: str, b: str) -> float:
    x, y = vector(a), vector(b)
    eps = np.float32(1e-8)
    return float(np.dot(x / max(np.linalg.norm(x), eps), y / max(np.linalg.norm(y), eps)))


def tokens(*texts: str) -> int:
    return sum(len(ids_of(text)) for text in texts)


@pytest.fixture
async def server(tmp_path: Path) -> Any:
    async with live_server(tmp_path, config_fields=EMBED) as live:
        yield live


async def check_scores(base_url: str, headers: dict[str, str]) -> None:
    async with httpx.AsyncClient(base_url=base_url, headers=headers) as client:
        for path in ("/score", "/v1/score"):
            reply = await client.post(path, json={"queries": QUERY, "documents": DOCUMENTS})
            assert reply.status_code == 200, reply.text
            body = reply.json()
            assert body["id"].startswith("score-")
            assert (body["object"], body["model"]) == ("list", MODEL)
            assert [d["index"] for d in body["data"]] == [0, 1, 2, 3]
            for datum, document in zip(body["data"], DOCUMENTS, strict=True):
                assert datum["object"] == "score"
                assert abs(datum["score"] - expected_score(QUERY, document)) <= 1e-6
            used = tokens(QUERY, *DOCUMENTS)
            assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] == used
        pairs = await client.post(
            "/score", json={"text_1": ["a", "b"], "text_2": ["c", "d"], "request_id": "mine"}
        )
        assert pairs.status_code == 200, pairs.text
        assert pairs.json()["id"] == "score-mine"
        scores = [d["score"] for d in pairs.json()["data"]]
        assert scores == pytest.approx(
            [expected_score("a", "c"), expected_score("b", "d")], abs=1e-6
        )
        ranked = sorted(
            range(len(DOCUMENTS)), key=lambda i: expected_score(QUERY, DOCUMENTS[i]), reverse=True
        )
        for path in ("/rerank", "/v1/rerank", "/v2/rerank"):
            reply = await client.post(
                path, json={"query": QUERY, "documents": DOCUMENTS, "top_n": 3}
            )
            assert reply.status_code == 200, reply.text
            body = reply.json()
            assert list(body) == ["id", "model", "usage", "results"]
            assert [r["index"] for r in body["results"]] == ranked[:3]
            for result in body["results"]:
                document = DOCUMENTS[result["index"]]
                assert result["document"] == {"text": document, "multi_modal": None}
                assert abs(result["relevance_score"] - expected_score(QUERY, document)) <= 1e-6
            used = tokens(QUERY, *DOCUMENTS)
            assert body["usage"] == {"prompt_tokens": used, "total_tokens": used}


async def test_scores_and_reranks_over_zmq(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        await check_scores(server.base_url, server.auth)


@pytest.mark.parametrize("runtime", [Runtime.VLLM, Runtime.SGLANG])
async def test_scores_and_reranks_over_grpc(runtime: Runtime, tmp_path: Path) -> None:
    async with embedding_gateway(runtime, tmp_path) as gateway:
        with trio.fail_after(TEST_TIMEOUT_S):
            await check_scores(gateway.base_url, {})


async def test_vllms_400s_and_404s(server: LiveServer, tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client:
            reply = await client.post("/score", json={"queries": ["a", "b"], "documents": ["c"]})
            assert reply.status_code == 400
            assert "1:1, 1:N or N:N" in reply.json()["error"]["message"]
            reply = await client.post("/rerank", json={"query": "a"})
            assert reply.status_code == 400
            assert reply.json()["error"]["param"] == "documents"
            reply = await client.post(
                "/rerank", json={"query": "a", "documents": ["b"], "model": "nope"}
            )
            assert reply.status_code == 404
    (tmp_path / "chat").mkdir()
    async with live_server(tmp_path / "chat") as chat:  # a generation model scores nothing
        with trio.fail_after(TEST_TIMEOUT_S):
            async with httpx.AsyncClient(base_url=chat.base_url, headers=chat.auth) as client:
                for path in ("/score", "/rerank"):
                    body = {"queries": "a", "documents": "b", "query": "a"}
                    if path == "/score":
                        del body["query"]
                    else:
                        del body["queries"]
                    reply = await client.post(path, json=body)
                    assert reply.status_code == 404, reply.text
                    assert reply.json()["error"]["type"] == "NotFoundError"


async def test_the_websocket_protocol_carries_reranks(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        headers = [(name.encode(), value.encode()) for name, value in server.auth.items()]
        async with trio_websocket.open_websocket_url(
            f"ws://127.0.0.1:{server.port}/v1/ws", extra_headers=headers
        ) as socket:
            body = {"query": QUERY, "documents": DOCUMENTS, "top_n": 1}
            request = {"type": "request", "id": 1, "path": "/rerank", "body": body}
            await socket.send_message(json.dumps(request))
            frame = json.loads(await socket.get_message())
    assert frame["type"] == "response", frame
    (best,) = frame["data"]["results"]
    assert best["index"] == max(
        range(len(DOCUMENTS)), key=lambda i: expected_score(QUERY, DOCUMENTS[i])
    )
