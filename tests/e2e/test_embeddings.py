"""POST /v1/embeddings, /pooling and /classify on real sockets (docs/pooling.md): the gateway
with `runner = "pooling"` in front of the reference vLLM EngineCore over ZMQ, whose pooler
derives each vector from the prompt ids alone (engines/pooling.py), so every expected value is
computed here from the demo model's tokenizer. The openai SDK's `embeddings.create`, float
and base64; vLLM's 400s; the client leaving aborts every input."""

from __future__ import annotations

import base64
import struct
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio
from openai import OpenAI

from smg_trio.engines.pooling import pooled_values
from smg_trio.model.folder import demo_model_path, load_model_dir
from tests.e2e.live_server import MODEL, LiveServer, live_server, openai_client

TEST_TIMEOUT_S: Final = 40.0
HIDDEN: Final = 64  # the demo model's config has no hidden_size: the engine's default
TOKENIZER: Final = load_model_dir(demo_model_path()).tokenizer
EMBED: Final = {"runner": "pooling", "convert": "embed"}


def expected(ids: list[int], task: str = "embed", **extra: Any) -> list[float]:
    return list(pooled_values(ids, task=task, hidden_size=HIDDEN, num_labels=2, **extra))


def ids_of(text: str) -> list[int]:
    return list(TOKENIZER.encode(text, add_special_tokens=True))


@pytest.fixture
async def server(tmp_path: Path) -> Any:
    async with live_server(tmp_path, config_fields=EMBED) as live:
        yield live


def sdk_embeddings(client: OpenAI) -> None:
    texts = ["hello world", "pooling models", "a third input, longer than the others"]
    floats = client.embeddings.create(model=MODEL, input=texts, encoding_format="float")
    assert [d.index for d in floats.data] == [0, 1, 2]
    for datum, text in zip(floats.data, texts, strict=True):
        assert datum.embedding == expected(ids_of(text))
    prompt_tokens = sum(len(ids_of(t)) for t in texts)
    assert floats.usage.prompt_tokens == floats.usage.total_tokens == prompt_tokens
    # The SDK asks for base64 by default and decodes the little-endian float32 itself.
    decoded = client.embeddings.create(model=MODEL, input=texts)
    assert [d.embedding for d in decoded.data] == [d.embedding for d in floats.data]
    tokens = client.embeddings.create(model=MODEL, input=[[5, 6, 7], [8]])
    assert [d.embedding for d in tokens.data] == [expected([5, 6, 7]), expected([8])]
    assert tokens.usage.prompt_tokens == 4


async def test_openai_sdk_embeddings_float_and_base64(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(sdk_embeddings, client)


async def test_the_body_has_vllms_shape(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client:
            reply = await client.post(
                "/v1/embeddings", json={"input": [1, 2, 3], "encoding_format": "base64"}
            )
            assert reply.status_code == 200, reply.text
            body = reply.json()
            assert body["id"].startswith("embd-")
            assert (body["object"], body["model"]) == ("list", MODEL)
            assert body["usage"] == {
                "prompt_tokens": 3,
                "total_tokens": 3,
                "completion_tokens": 0,
                "prompt_tokens_details": None,
                "completion_tokens_details": None,
            }
            (datum,) = body["data"]
            assert (datum["object"], datum["index"]) == ("embedding", 0)
            raw = base64.b64decode(datum["embedding"])
            assert list(struct.unpack(f"<{HIDDEN}f", raw)) == expected([1, 2, 3])


BAD_BODIES: Final = [
    ({"input": ""}, "The decoder prompt cannot be empty", "input"),
    ({"input": []}, "You must pass at least one prompt", "input"),
    ({"input": ["a", ""]}, "The decoder prompt cannot be empty", "input"),
    ({"input": [[]]}, "The decoder prompt cannot be empty", "input"),
    ({"input": 5}, "input must be", "input"),
    ({"input": [1, "a"]}, "input must be", "input"),
    ({"input": [5000]}, "Token id 5000 is out of vocabulary", "input"),
    ({"input": "hi", "encoding_format": "bytes"}, "encoding_format", "encoding_format"),
    ({"input": "hi", "dimensions": 8}, "does not support Matryoshka", "dimensions"),
    ({"input": "hi", "normalize": True}, "`normalize` was removed", "normalize"),
    ({"input": "hi", "truncate_prompt_tokens": 5000}, "greater than max_model_len", None),
    ({"input": "hi", "model": "nope"}, "The model `nope` does not exist.", "model"),
]


async def test_vllms_400s(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client:
            for body, words, param in BAD_BODIES:
                reply = await client.post("/v1/embeddings", json=body)
                error = reply.json()["error"]
                expected_status = 404 if param == "model" else 400
                assert reply.status_code == expected_status, (body, reply.text)
                assert words in error["message"], (body, error)
                if param is not None:
                    assert error["param"] == param, (body, error)


async def test_an_over_long_input_without_truncation_is_vllms_400(server: LiveServer) -> None:
    context = server.serving.gateway.prompt_model.context_length
    assert context is not None
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client:
            reply = await client.post("/v1/embeddings", json={"input": [7] * (context + 1)})
            assert reply.status_code == 400
            error = reply.json()["error"]
            assert error["message"].startswith(
                f"This model's maximum context length is {context} tokens. However, your "
                f"prompt contains at least {context + 1} input tokens"
            )
            assert error["param"] == "input_tokens"
            # The same input truncated: its first `context` tokens (vLLM's default side).
            reply = await client.post(
                "/v1/embeddings", json={"input": [7] * (context + 1), "truncate_prompt_tokens": 4}
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["data"][0]["embedding"] == expected([7] * 4)
            assert reply.json()["usage"]["prompt_tokens"] == 4


async def test_a_generation_path_to_an_embedding_model_is_a_404(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client:
            reply = await client.post(
                "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
            )
            assert reply.status_code == 404, reply.text
            error = reply.json()["error"]
            assert error["type"] == "NotFoundError"
            assert "does not support /v1/chat/completions" in error["message"]
            reply = await client.post("/classify", json={"input": "hi"})
            assert reply.status_code == 404, reply.text
