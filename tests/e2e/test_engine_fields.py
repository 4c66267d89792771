"""The new request fields reach the engine and do what they say, through the gateway, on every
wire that carries them (docs/request-fields.md §1, §2, §4): `logit_bias` +100 forces its token
into the text, -100 bans it, `allowed_token_ids` restricts the output, bad words never appear,
and the structured-output constraint the engine received is the one the client sent (the
reference engines report what they decoded: `engines.received_log`).

Each engine answers from a known script (ZMQ: replay of a text; gRPC: echo of the prompt), so a
test first shows the word is there without the field, then that the field changes it."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio
from grpclib.client import Channel

from smg_trio.backends.asyncio_bridge import open_asyncio_bridge
from smg_trio.backends.grpc_services import close_channel
from smg_trio.engines.generation import Mode
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.serve import Serving, serve
from smg_trio.serving.worker_specs import WorkerSpec
from smg_trio.wire._proto import smg_trio_engine_grpc
from smg_trio.wire._proto import smg_trio_engine_pb2 as engine_pb2
from tests.backends.grpc_reference import start_engine, stop_engine
from tests.e2e.live_server import MODEL, live_server

TOKENIZER: Final = load_model_dir(demo_model_path()).tokenizer
APPLE: Final = TOKENIZER.encode(" apple", add_special_tokens=False)  # one token
NO: Final = TOKENIZER.encode(" no", add_special_tokens=False)  # one token
STREAM: Final = TOKENIZER.encode(" stream", add_special_tokens=False)  # one token
PROMPT: Final = "apple stream apple stream apple stream"  # what the engines say back
READY_S: Final = 20.0
CAP_S: Final = 30.0

Received = Callable[[str], Awaitable[dict[str, Any] | None]]

ZMQ: Final = [Runtime.VLLM, Runtime.TOKENSPEED]
GRPC: Final = [Runtime.VLLM, Runtime.SGLANG, Runtime.TOKENSPEED, Runtime.TRTLLM, Runtime.MLX]
WORKERS: Final = [(r, Wire.ZMQ) for r in ZMQ] + [(r, Wire.GRPC) for r in GRPC]
SCHEMA: Final = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@asynccontextmanager
async def worker(
    runtime: Runtime, wire: Wire, tmp_path: Path
) -> AsyncIterator[tuple[str, Received]]:
    """A gateway in front of one reference engine: (base URL, what the engine received)."""
    if wire is Wire.ZMQ:
        async with live_server(
            tmp_path, api_key=None, runtime=runtime, replay_text=" " + PROMPT
        ) as server:

            async def received_zmq(fragment: str) -> dict[str, Any] | None:
                value = await server.backend.call_utility("smg_trio_received", fragment)
                return value if value is None else dict(value)

            yield server.base_url, received_zmq
        return
    with (tmp_path / "engine.log").open("wb") as log:
        process, port = await start_engine(runtime, log, mode=Mode.ECHO)
        try:
            async with open_asyncio_bridge() as bridge:
                channel = await bridge.run(_open_channel, port)
                stub = smg_trio_engine_grpc.EngineCountersStub(channel)

                async def received_grpc(fragment: str) -> dict[str, Any] | None:
                    async def get() -> engine_pb2.GetReceivedResponse:
                        request = engine_pb2.GetReceivedRequest(request_id=fragment)
                        return await stub.GetReceived(request)

                    reply = await bridge.run(get)
                    return json.loads(reply.request_json) if reply.found else None

                try:
                    async with _gateway(runtime, port) as base:
                        yield base, received_grpc
                finally:
                    with trio.CancelScope(shield=True):
                        await bridge.run(close_channel, channel)
        finally:
            await stop_engine(process)


async def _open_channel(port: int) -> Channel:
    return Channel("127.0.0.1", port)  # on the bridge's loop: grpclib binds to the running one


@asynccontextmanager
async def _gateway(runtime: Runtime, port: int) -> AsyncIterator[str]:
    config = GatewayConfig(
        model_path=demo_model_path(),
        workers=(WorkerSpec(runtime, Wire.GRPC, f"127.0.0.1:{port}"),),
        port=0,
    )
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        serving: Serving = await nursery.start(partial(serve, config, shutdown_trigger=stop.wait))
        with trio.fail_after(READY_S):
            await serving.gateway.pool.workers[0].backend.wait_ready()
        try:
            yield f"http://127.0.0.1:{serving.port}"
        finally:
            stop.set()


async def chat(base: str, request_id: str = "", **extra: Any) -> str:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 6,
        "temperature": 0,
        **extra,
    }
    headers = {"x-request-id": request_id} if request_id else {}
    async with httpx.AsyncClient(timeout=None) as client:
        response = await client.post(f"{base}/v1/chat/completions", json=body, headers=headers)
    assert response.status_code == 200, response.text
    content: str = response.json()["choices"][0]["message"]["content"]
    return content


@pytest.mark.parametrize(("runtime", "wire"), WORKERS, ids=lambda v: str(v.value))
async def test_engine_fields_arrive_and_are_honoured(
    runtime: Runtime, wire: Wire, tmp_path: Path
) -> None:
    with trio.fail_after(CAP_S):
        async with worker(runtime, wire, tmp_path) as (base, received):
            plain = await chat(base, max_tokens=12)
            assert "stream" in plain, plain  # the script says it: the checks below can fail
            if runtime is not Runtime.TRTLLM:  # TRT-LLM: 400 (docs/request-fields.md §4)
                forced = await chat(base, logit_bias={str(APPLE[0]): 100})
                assert forced.strip() == " ".join(["apple"] * 6), forced
                banned = await chat(base, max_tokens=12, logit_bias={str(STREAM[0]): -100})
                assert " stream" not in banned, banned
            if (runtime, wire) in ((Runtime.VLLM, Wire.ZMQ), (Runtime.TRTLLM, Wire.GRPC)):
                cleaned = await chat(base, max_tokens=12, bad_words=[" stream"])
                assert "stream" not in cleaned, cleaned
            if (runtime, wire) == (Runtime.VLLM, Wire.ZMQ):
                allowed = await chat(base, max_tokens=8, allowed_token_ids=[APPLE[0], NO[0]])
                assert re.fullmatch(r"( ?(apple|no))+", allowed), allowed
            if runtime is Runtime.MLX:
                return  # no grammar on its wire: a 400 (docs/request-fields.md §2)
            tag = uuid.uuid4().hex
            response_format = {
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": SCHEMA},
            }
            await chat(base, f"schema-{tag}", response_format=response_format)
            assert json.loads(schema_text(await received(f"schema-{tag}"), runtime, wire)) == SCHEMA
            said = await chat(base, f"choice-{tag}", guided_choice=["yes", "no"])
            assert said == "yes"  # the engine follows a choice: its first one, then EOS
            check_choice(await received(f"choice-{tag}"), runtime, wire)


def schema_text(fields: dict[str, Any] | None, runtime: Runtime, wire: Wire) -> str:
    """The JSON schema as the engine's wire carried it."""
    assert fields is not None
    match runtime, wire:
        case Runtime.VLLM, Wire.ZMQ:
            assert fields["structured_outputs"]["_backend"] == "xgrammar"
            return str(fields["structured_outputs"]["json"])
        case Runtime.TOKENSPEED, Wire.ZMQ:
            return str(fields["json_schema"])
        case Runtime.TRTLLM, Wire.GRPC:
            assert fields["guided_decoding"]["guide_type"] == "GUIDE_TYPE_JSON_SCHEMA"
            return str(fields["guided_decoding"]["guide"])
        case _:
            return str(fields["sampling_params"]["json_schema"])


def check_choice(fields: dict[str, Any] | None, runtime: Runtime, wire: Wire) -> None:
    """vLLM's EngineCore gets vLLM's grammar for them, vLLM's gRPC servicer the choices; the
    others a regex that must match exactly them."""
    assert fields is not None
    match runtime, wire:
        case Runtime.VLLM, Wire.ZMQ:
            assert fields["structured_outputs"]["grammar"] == 'root ::= "yes" | "no"'
            assert "choice" not in fields["structured_outputs"]
            return
        case Runtime.VLLM, Wire.GRPC:
            assert fields["sampling_params"]["choice"]["choices"] == ["yes", "no"]
            return
        case Runtime.TOKENSPEED, Wire.ZMQ:
            regex = fields["regex"]
        case Runtime.TRTLLM, Wire.GRPC:
            assert fields["guided_decoding"]["guide_type"] == "GUIDE_TYPE_REGEX"
            regex = fields["guided_decoding"]["guide"]
        case _:
            regex = fields["sampling_params"]["regex"]
    assert re.fullmatch(regex, "yes")
    assert re.fullmatch(regex, "no")
    assert not re.fullmatch(regex, "yesno")
