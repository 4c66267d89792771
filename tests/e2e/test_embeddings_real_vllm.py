"""Opt-in: smg-trio's /v1/embeddings and /pooling in front of a real headless vLLM EngineCore
over ZMQ (`--runner pooling --convert embed`) answer what vLLM's own server answers for the
same model: every vector within 1e-6 of vLLM's (strings, batches, token ids, token-id batches,
a chat conversation), base64 decoding to the same floats, usage equal (docs/pooling.md).

Run with SMG_TRIO_VLLM_VENV=/path/to/venv SMG_TRIO_VLLM_MODEL=/path/to/tiny-llama.
"""

from __future__ import annotations

import base64
import struct
import sys
from collections.abc import Iterator
from typing import Any, Final

import httpx
import pytest

from tests.e2e.real_vllm import (
    MARKS,
    MODEL,
    SERVED_NAME,
    Launched,
    free_port,
    launch,
    running,
    vllm_command,
    wait_healthy,
)

pytestmark = list(MARKS)

TOLERANCE: Final = 1e-6
EMBED_FLAGS: Final = ("--runner", "pooling", "--convert", "embed")
SENTENCES: Final = [
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Pooling models answer with one vector per input.",
    "smg-trio routes requests to inference engines",
    "a",
    "Numbers like 12345 and symbols like @#% are tokens too.",
    "Une phrase en français, avec des accents: é è à.",
    "A much longer input " + "that repeats itself " * 20,
    "newlines\nand\ttabs",
    "emoji 🙂 and CJK 漢字",
]
TOKEN_LISTS: Final = [[1, 2, 3, 4, 5], [100, 200, 300], [7], [42] * 30, list(range(10, 60))]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """vLLM's own HTTP server and smg-trio in front of a headless engine, both embedding."""
    log_dir = tmp_path_factory.mktemp("embed-logs")
    vllm_port, gateway_port, engine_port = free_port(), free_port(), free_port()
    launched: list[Launched] = []
    with running(launched):
        http = vllm_command(
            *EMBED_FLAGS, "--served-model-name", SERVED_NAME,
            "--host", "127.0.0.1", "--port", str(vllm_port),
        )  # fmt: skip
        launched.append(launch("vllm-http-embed", http, log_dir))
        gateway = [
            *(sys.executable, "-m", "smg_trio", "serve"),
            *("--model-path", MODEL, "--served-model-name", SERVED_NAME, *EMBED_FLAGS),
            *("--worker", f"vllm+zmq://127.0.0.1:{engine_port}"),
            *("--host", "127.0.0.1", "--port", str(gateway_port)),
        ]
        launched.append(launch("gateway-embed", gateway, log_dir))
        headless = vllm_command(
            *EMBED_FLAGS, "--headless", "--data-parallel-size", "1",
            "--data-parallel-size-local", "1", "--data-parallel-address", "127.0.0.1",
            "--data-parallel-rpc-port", str(engine_port),
        )  # fmt: skip
        launched.append(launch("vllm-headless-embed", headless, log_dir))
        vllm_url, gateway_url = f"http://127.0.0.1:{vllm_port}", f"http://127.0.0.1:{gateway_port}"
        wait_healthy(launched, vllm_url)
        wait_healthy(launched, gateway_url)
        yield vllm_url, gateway_url


def post(base_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    with httpx.Client(base_url=base_url, timeout=120.0) as client:
        reply = client.post(path, json={"model": SERVED_NAME, **body})
        assert reply.status_code == 200, reply.text
        answer: dict[str, Any] = reply.json()
        return answer


def vectors(answer: dict[str, Any], key: str = "embedding") -> list[Any]:
    return [datum[key] for datum in sorted(answer["data"], key=lambda d: d["index"])]


BODIES: Final[list[dict[str, Any]]] = [
    {"input": SENTENCES[0]},  # one string
    {"input": SENTENCES},  # a batch of ten strings
    {"input": TOKEN_LISTS[0]},  # one token-id prompt
    {"input": TOKEN_LISTS},  # a batch of five token-id prompts
    *({"input": sentence} for sentence in SENTENCES[1:4]),  # strings one by one
    {"messages": [{"role": "user", "content": "Embed this conversation."}]},
    {"input": SENTENCES[7], "truncate_prompt_tokens": 16},
]


def test_vectors_and_usage_equal_vllms_own_server(servers: tuple[str, str]) -> None:
    vllm_url, gateway_url = servers
    compared, worst = 0, 0.0
    for body in BODIES:
        theirs, ours = (
            post(vllm_url, "/v1/embeddings", body),
            post(gateway_url, "/v1/embeddings", body),
        )
        assert ours["usage"] == theirs["usage"], body
        assert ours["model"] == theirs["model"] == SERVED_NAME
        assert len(ours["data"]) == len(theirs["data"])
        for mine, reference in zip(vectors(ours), vectors(theirs), strict=True):
            assert len(mine) == len(reference) == 128
            worst = max(worst, max(abs(a - b) for a, b in zip(mine, reference, strict=True)))
            compared += 1
    print(f"{compared} vectors compared, max abs difference {worst:.3g}")
    assert compared >= 20
    assert worst <= TOLERANCE


def test_base64_decodes_to_the_same_floats(servers: tuple[str, str]) -> None:
    vllm_url, gateway_url = servers
    body = {"input": [*SENTENCES[:3], "and one more"]}
    floats = vectors(post(vllm_url, "/v1/embeddings", body))
    for url in (vllm_url, gateway_url):
        encoded = vectors(post(url, "/v1/embeddings", {**body, "encoding_format": "base64"}))
        decoded = [list(struct.unpack(f"<{len(floats[0])}f", base64.b64decode(e))) for e in encoded]
        for mine, reference in zip(decoded, floats, strict=True):
            assert max(abs(a - b) for a, b in zip(mine, reference, strict=True)) <= TOLERANCE


def test_pooling_answers_as_vllms(servers: tuple[str, str]) -> None:
    vllm_url, gateway_url = servers
    body = {"input": [SENTENCES[1], SENTENCES[2]]}
    theirs, ours = post(vllm_url, "/pooling", body), post(gateway_url, "/pooling", body)
    assert ours["usage"] == theirs["usage"]
    assert ours["id"].startswith("pooling-")
    assert theirs["id"].startswith("pooling-")
    for mine, reference in zip(vectors(ours, "data"), vectors(theirs, "data"), strict=True):
        assert max(abs(a - b) for a, b in zip(mine, reference, strict=True)) <= TOLERANCE


def test_the_same_400s_as_vllm(servers: tuple[str, str]) -> None:
    vllm_url, gateway_url = servers
    bodies: list[dict[str, Any]] = [
        {"input": ""},
        {"input": []},
        {"input": [5000]},
        {"input": [SENTENCES[1], TOKEN_LISTS[1]]},
        {"input": "hi", "dimensions": 8},
        {"input": "hi " * 3000},
        {"input": "hi", "truncate_prompt_tokens": 5000},
    ]
    for body in bodies:
        with httpx.Client(timeout=60.0) as client:
            theirs = client.post(f"{vllm_url}/v1/embeddings", json=body)
            ours = client.post(f"{gateway_url}/v1/embeddings", json=body)
        assert (ours.status_code, theirs.status_code) == (400, 400), body
        their_words = theirs.json()["error"]["message"].split(" (parameter=")[0]
        if "validation error" in their_words:  # pydantic's list: ours names the field
            assert ours.json()["error"]["param"] == "input"
            continue
        assert ours.json()["error"]["message"].startswith(their_words[:40]), (body, their_words)
