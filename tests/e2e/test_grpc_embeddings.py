"""POST /v1/embeddings through gRPC workers (docs/pooling.md §2.1): the gateway with `runner =
"pooling"` in front of the reference vLLM and SGLang gRPC engines run with `--runner pooling`,
on real sockets. Each input is one Embed call; the engine derives its vector from the prompt
ids alone (engines/pooling.py), so every expected value is computed here. The openai SDK's
`embeddings.create` (float and base64), what one Embed call cannot carry (400s naming the
field), and a client that leaves: every call of its request is cancelled and aborted.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio
from grpclib.client import Channel
from openai import OpenAI

from harness.served_gateway import served_gateway
from smg_trio.backends.asyncio_bridge import open_asyncio_bridge
from smg_trio.backends.grpc_services import close_channel
from smg_trio.engines.pooling import pooled_values
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.serve import Serving
from smg_trio.serving.worker_specs import WorkerSpec
from smg_trio.wire._proto import smg_trio_engine_grpc
from smg_trio.wire._proto import smg_trio_engine_pb2 as counters_pb2
from tests.backends.grpc_reference import start_engine, stop_engine
from tests.e2e.test_embeddings import sdk_embeddings

TEST_TIMEOUT_S: Final = 40.0
READY_S: Final = 20.0
HIDDEN: Final = 64  # the demo model's config has no hidden_size: the engines' default
TOKENIZER: Final = load_model_dir(demo_model_path()).tokenizer
RUNTIMES: Final = [Runtime.VLLM, Runtime.SGLANG]
MODEL: Final = "demo_model"  # the demo folder's name


def expected(ids: list[int]) -> list[float]:
    return list(pooled_values(ids, task="embed", hidden_size=HIDDEN, num_labels=2))


def ids_of(text: str) -> list[int]:
    return list(TOKENIZER.encode(text, add_special_tokens=True))


class GrpcEmbeddingGateway:
    def __init__(self, serving: Serving, engine_port: int) -> None:
        self.serving = serving
        self.base_url = f"http://127.0.0.1:{serving.port}"
        self.engine_port = engine_port

    async def counters(self) -> Mapping[str, int]:
        async def get() -> dict[str, int]:
            channel = Channel("127.0.0.1", self.engine_port)
            try:
                stub = smg_trio_engine_grpc.EngineCountersStub(channel)
                return dict((await stub.Get(counters_pb2.GetCountersRequest())).counters)
            finally:
                await close_channel(channel)

        async with open_asyncio_bridge() as bridge:
            return await bridge.run(get)


@asynccontextmanager
async def embedding_gateway(
    runtime: Runtime, tmp_path: Path, step_ms: float = 2.0
) -> AsyncIterator[GrpcEmbeddingGateway]:
    with (tmp_path / "engine.log").open("wb") as log:
        process, port = await start_engine(
            runtime, log, step_ms=step_ms, extra=("--runner", "pooling")
        )
        try:
            config = GatewayConfig(
                model_path=demo_model_path(),
                workers=(WorkerSpec(runtime, Wire.GRPC, f"127.0.0.1:{port}"),),
                port=0,
                runner="pooling",
                convert="embed",
            )
            async with served_gateway(config) as served:
                await served.wait_ready(served.serving.gateway.pool.workers)
                yield GrpcEmbeddingGateway(served.serving, port)
        finally:
            await stop_engine(process)


def sdk_embeddings_at(base_url: str) -> None:
    """The openai SDK's embeddings checks of test_embeddings.py, against `base_url`."""
    with OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=20) as client:
        sdk_embeddings(client)


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_openai_sdk_embeddings_through_a_grpc_worker(
    runtime: Runtime, tmp_path: Path
) -> None:
    async with embedding_gateway(runtime, tmp_path) as gateway:
        with trio.fail_after(TEST_TIMEOUT_S):
            await trio.to_thread.run_sync(sdk_embeddings_at, gateway.base_url)
            async with httpx.AsyncClient(base_url=gateway.base_url) as client:
                reply = await client.post(
                    "/v1/embeddings", json={"input": [1, 2, 3], "encoding_format": "base64"}
                )
            assert reply.status_code == 200, reply.text
            body = reply.json()
            assert body["id"].startswith("embd-")
            assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] == 3
            raw = base64.b64decode(body["data"][0]["embedding"])
            assert list(struct.unpack(f"<{HIDDEN}f", raw)) == expected([1, 2, 3])
            assert (await gateway.counters())["requests_finished"] == 3 + 3 + 2 + 1


BAD_BODIES: Final[list[tuple[dict[str, Any], str, str]]] = [
    ({"input": "hi", "use_activation": False}, "use_activation=false cannot", "use_activation"),
    ({"input": ""}, "The decoder prompt cannot be empty", "input"),
    ({"input": [5000]}, "Token id 5000 is out of vocabulary", "input"),
]


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_what_embed_cannot_carry_is_a_400_naming_it(runtime: Runtime, tmp_path: Path) -> None:
    async with embedding_gateway(runtime, tmp_path) as gateway:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with httpx.AsyncClient(base_url=gateway.base_url) as client:
                for body, words, param in BAD_BODIES:
                    reply = await client.post("/v1/embeddings", json=body)
                    assert reply.status_code == 400, (body, reply.text)
                    error = reply.json()["error"]
                    assert words in error["message"], (body, error)
                    assert error["param"] == param, (body, error)
            assert (await gateway.counters())["requests_added"] == 0


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_a_client_that_leaves_aborts_every_input(runtime: Runtime, tmp_path: Path) -> None:
    # A step every 0.5 s: the inputs wait in the engine's queue when the client goes.
    inputs = [[400 + i, 7] for i in range(6)]
    async with embedding_gateway(runtime, tmp_path, step_ms=500.0) as gateway:
        with trio.fail_after(TEST_TIMEOUT_S):
            async with httpx.AsyncClient(base_url=gateway.base_url) as client:
                await client.post("/v1/embeddings", json={"input": [400]})  # the idle step
                with trio.move_on_after(0.1):
                    await client.post("/v1/embeddings", json={"input": inputs})
                    raise AssertionError("the request should still be waiting for its step")
            while True:
                counters = await gateway.counters()
                if counters["abort_ids_received"] >= len(inputs):
                    break
                await trio.sleep(0.01)
            # The engine counts an Abort when it reads it; the call leaves our table when its
            # answer is back (a leak would hit the deadline above).
            workers = gateway.serving.gateway.pool.workers
            while True:
                if workers[0].backend.statistics().in_flight == 0:
                    break
                await trio.sleep(0.01)
        assert counters["requests_added"] == 1 + len(inputs)
        assert counters["requests_finished"] == 1
        assert counters["requests_active"] + counters["requests_waiting"] == 0
        assert counters["abort_ids_received"] == len(inputs)
        assert workers[0].backend.statistics().in_flight == 0
