"""`serve` with gRPC workers: the reference SGLang and vLLM gRPC engines behind the real server.

SGLang's worker rejects string stops, so the gateway strips them and enforces them itself; the
vLLM gRPC engine matches them too. Either way the client sees the text cut before the stop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.serve import Serving, serve
from smg_trio.serving.worker_specs import WorkerSpec
from tests.backends.grpc_reference import start_engine, stop_engine

READY_S = 20.0


@asynccontextmanager
async def grpc_gateway(runtime: Runtime, tmp_path: Path) -> AsyncIterator[str]:
    with (tmp_path / "engine.log").open("wb") as log:
        process, port = await start_engine(runtime, log)
        try:
            config = GatewayConfig(
                model_path=demo_model_path(),
                workers=(WorkerSpec(runtime, Wire.GRPC, f"127.0.0.1:{port}"),),
                port=0,
            )
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                serving: Serving = await nursery.start(
                    partial(serve, config, shutdown_trigger=stop.wait)
                )
                with trio.fail_after(READY_S):
                    await serving.gateway.pool.workers[0].backend.wait_ready()
                try:
                    yield f"http://127.0.0.1:{serving.port}"
                finally:
                    stop.set()
        finally:
            await stop_engine(process)


async def chat(client: httpx.AsyncClient, base: str, **extra: Any) -> dict[str, Any]:
    body = {
        "messages": [{"role": "user", "content": "Say something"}],
        "temperature": 0,
        "max_tokens": 24,
        "ignore_eos": True,
        **extra,
    }
    response = await client.post(f"{base}/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


@pytest.mark.parametrize("runtime", [Runtime.SGLANG, Runtime.VLLM])
async def test_stop_strings_through_a_grpc_worker(runtime: Runtime, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with grpc_gateway(runtime, tmp_path) as base, httpx.AsyncClient() as client:
            free = await chat(client, base)
            text = free["choices"][0]["message"]["content"]
            assert free["choices"][0]["finish_reason"] == "length"
            assert len(text) > 6
            stop = text[len(text) // 2 : len(text) // 2 + 2]
            stopped = await chat(client, base, stop=[stop])
            choice = stopped["choices"][0]
            # "" (not null) even when the stop is at the very start, as vLLM answers.
            assert choice["message"]["content"] == text[: text.index(stop)]
            assert choice["finish_reason"] == "stop"
            assert choice["matched_stop"] == stop


@pytest.mark.parametrize(
    "runtime", [Runtime.SGLANG, Runtime.VLLM, Runtime.TOKENSPEED, Runtime.TRTLLM, Runtime.MLX]
)
async def test_logprobs_through_a_grpc_worker(runtime: Runtime, tmp_path: Path) -> None:
    """Every gRPC wire carries logprobs: one entry per generated token, top-2 alternatives."""
    with trio.fail_after(60):
        async with grpc_gateway(runtime, tmp_path) as base, httpx.AsyncClient() as client:
            result = await chat(client, base, max_tokens=6, logprobs=True, top_logprobs=2)
            choice = result["choices"][0]
            content = choice["logprobs"]["content"]
            assert len(content) == result["usage"]["completion_tokens"] == 6
            text, spelled = choice["message"]["content"], "".join(e["token"] for e in content)
            # A token whose text ends inside a character shows "" until a later token completes
            # it (vLLM's rule, core/logprobs.py): the strings spell the text but for the
            # characters the output never completes, which the text shows as U+FFFD.
            assert spelled == text.replace("\ufffd", "")
            for entry in content:
                assert entry["bytes"] == list(entry["token"].encode())
                assert len(entry["top_logprobs"]) == 2
                assert entry["top_logprobs"][0]["token"] == entry["token"]
                assert entry["top_logprobs"][0]["logprob"] >= entry["top_logprobs"][1]["logprob"]
