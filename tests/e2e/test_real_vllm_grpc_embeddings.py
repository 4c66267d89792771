"""Opt-in: `/v1/embeddings`, `/score` and `/rerank` through smg-trio in front of a REAL vLLM gRPC engine (`vllm serve
--grpc`, the smg-grpc-servicer plugin) serving the tiny llama as an embedding model (`--runner
pooling --convert embed`), against vLLM's own HTTP server on the same model from the same venv:
every vector and every score within 1e-6 of vLLM's (docs/pooling.md §7), the usage equal, for
batches of strings and of token ids, float and base64; the rerank order equal.

Needs `SMG_TRIO_VLLM_VENV` (a venv with vllm and smg-grpc-servicer 0.14.0, e.g. /opt/venvs/vllm)
and `SMG_TRIO_VLLM_MODEL` (e.g. /work/shared/models/tiny-llama); see docs/real-engines.md. The
two servers run one after the other. Takes minutes:
    SMG_TRIO_VLLM_VENV=/opt/venvs/vllm SMG_TRIO_VLLM_MODEL=/work/shared/models/tiny-llama \\
        .venv/bin/pytest tests/e2e/test_real_vllm_grpc_embeddings.py -m real_engine -s
"""

from __future__ import annotations

import base64
import json
import struct
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Final

import httpx
import pytest
import trio

from harness.served_gateway import served_gateway
from smg_trio.model.folder import load_model_dir
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.worker_specs import WorkerSpec
from tests.backends.test_real_vllm_zmq import (
    MODEL,
    STARTUP_S,
    VENV,
    free_port,
    start_vllm,
    stop_vllm,
    wait_healthy,
)

POOLING_FLAGS: Final = ("--runner", "pooling", "--convert", "embed")
TOLERANCE: Final = 1e-6
TEXTS: Final = [
    "def hello(world):",
    "The quick brown fox jumps over the lazy dog.",
    "pooling models behind one gateway",
    "a",
    "Embeddings are vectors; rerankers score pairs.",
    "12345 67890",
    "Ünïcödé and emoji 🙂 in one input",
    "the same words, the same words, the same words",
]
TOKEN_INPUTS: Final = [[1, 450, 996, 17], [5, 6, 7], [1], list(range(3, 60))]

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.skipif(
        not (VENV and MODEL),
        reason="set SMG_TRIO_VLLM_VENV and SMG_TRIO_VLLM_MODEL to run against a real vLLM",
    ),
    pytest.mark.timeout(900),
]


def bodies(model: str) -> list[dict[str, Any]]:
    """The requests sent to both servers: 8 + 4 + 4 + 4 + 1 = 21 inputs."""
    return [
        {"model": model, "input": TEXTS, "encoding_format": "float"},
        {"model": model, "input": TEXTS[:4], "encoding_format": "base64"},
        {"model": model, "input": TOKEN_INPUTS, "encoding_format": "float"},
        *({"model": model, "input": text} for text in TEXTS[4:]),
        {"model": model, "input": TOKEN_INPUTS[0]},
    ]


def vectors_of(body: dict[str, Any]) -> list[list[float]]:
    out = []
    for datum in body["data"]:
        embedding = datum["embedding"]
        if isinstance(embedding, str):
            raw = base64.b64decode(embedding)
            embedding = list(struct.unpack(f"<{len(raw) // 4}f", raw))
        out.append(embedding)
    return out


def scoring_bodies(model: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("/score", {"model": model, "queries": TEXTS[0], "documents": TEXTS[1:]}),
        ("/v1/score", {"model": model, "text_1": TEXTS[:3], "text_2": TEXTS[3:6]}),
        ("/rerank", {"model": model, "query": TEXTS[2], "documents": TEXTS, "top_n": 5}),
        ("/v2/rerank", {"model": model, "query": TEXTS[4], "documents": TEXTS[:6]}),
    ]


async def ask_all(base_url: str, model: str) -> list[dict[str, Any]]:
    """Every embeddings body's answer, then every scoring body's."""
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        answers = []
        requests = [("/v1/embeddings", body) for body in bodies(model)]
        for path, body in [*requests, *scoring_bodies(model)]:
            reply = await client.post(path, json=body)
            assert reply.status_code == 200, (path, reply.text)
            answers.append(reply.json())
        return answers


async def through_smg_trio(model: str, log: IO[bytes]) -> list[dict[str, Any]]:
    port, kv_port = free_port(), free_port()
    kv_events = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://127.0.0.1:{kv_port}",
    }
    flags = ["--grpc", "--host", "127.0.0.1", "--port", str(port)]
    process = await start_vllm(
        [*POOLING_FLAGS, *flags, "--kv-events-config", json.dumps(kv_events)], log
    )
    try:
        config = GatewayConfig(
            model_path=Path(MODEL),
            workers=(WorkerSpec(Runtime.VLLM, Wire.GRPC, f"127.0.0.1:{port}"),),
            port=0,
            runner="pooling",
            convert="embed",
        )
        async with served_gateway(config) as served:
            with trio.fail_after(STARTUP_S):
                await served.serving.gateway.pool.workers[0].backend.wait_ready()
            return await ask_all(f"http://127.0.0.1:{served.serving.port}", model)
    finally:
        await stop_vllm(process)


async def vllm_http(model: str, log: IO[bytes]) -> list[dict[str, Any]]:
    port = free_port()
    flags = ["--served-model-name", model, "--host", "127.0.0.1", "--port", str(port)]
    process = await start_vllm([*POOLING_FLAGS, *flags], log)
    base = f"http://127.0.0.1:{port}"
    try:
        await wait_healthy(base)
        return await ask_all(base, model)
    finally:
        await stop_vllm(process)


def max_difference(ours: Sequence[list[float]], theirs: Sequence[list[float]]) -> float:
    assert [len(v) for v in ours] == [len(v) for v in theirs]
    pairs = zip(ours, theirs, strict=True)
    return max(abs(a - b) for u, v in pairs for a, b in zip(u, v, strict=True))


async def test_vectors_through_smg_trio_over_grpc_equal_vllms_own(tmp_path: Path) -> None:
    model = load_model_dir(MODEL).served_name
    log_path = tmp_path / "vllm.log"
    try:
        with log_path.open("ab") as log:
            ours = await through_smg_trio(model, log)
            theirs = await vllm_http(model, log)
    except BaseException:
        sys.stderr.write(log_path.read_text(errors="replace")[-20_000:])
        raise
    embeddings = len(bodies(model))
    compare_scores(ours[embeddings:], theirs[embeddings:])
    ours, theirs = ours[:embeddings], theirs[:embeddings]
    compared = 0
    worst = 0.0
    for our_body, their_body in zip(ours, theirs, strict=True):
        our_vectors, their_vectors = vectors_of(our_body), vectors_of(their_body)
        worst = max(worst, max_difference(our_vectors, their_vectors))
        compared += len(our_vectors)
        assert our_body["usage"] == their_body["usage"]
        assert [d["index"] for d in our_body["data"]] == [d["index"] for d in their_body["data"]]
    print(f"{compared} vectors of {len(vectors_of(ours[0])[0])} values; max |diff| {worst:.3g}")
    assert compared >= 20
    assert worst <= TOLERANCE


def compare_scores(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> None:
    worst = 0.0
    for our_body, their_body in zip(ours, theirs, strict=True):
        assert our_body["usage"] == their_body["usage"]
        if "results" in their_body:  # a rerank: the same order, scores and documents
            assert [r["index"] for r in our_body["results"]] == [
                r["index"] for r in their_body["results"]
            ]
            assert [r["document"] for r in our_body["results"]] == [
                r["document"] for r in their_body["results"]
            ]
            pairs = zip(our_body["results"], their_body["results"], strict=True)
            differences = [abs(a["relevance_score"] - b["relevance_score"]) for a, b in pairs]
        else:
            assert [d["index"] for d in our_body["data"]] == [
                d["index"] for d in their_body["data"]
            ]
            pairs = zip(our_body["data"], their_body["data"], strict=True)
            differences = [abs(a["score"] - b["score"]) for a, b in pairs]
        worst = max(worst, *differences)
    print(f"{len(ours)} scoring bodies; max |score diff| {worst:.3g}")
    assert worst <= TOLERANCE
