"""LLaVA-NeXT and Gemma 3 images end to end (docs/images.md §4.4, §4.5): the openai and
anthropic SDKs send images to a gateway serving each family's folder (tests/model/
family_folders.py: the test tokenizer, each family's processor settings, no weights) in front
of the reference vLLM EngineCore, which checks every image's kwargs against the family's
field config as vLLM declares it (engines/vllm_mm_fields.py) and reports what arrived. Chat,
Messages and Responses inputs reach it alike (the same image, the same identifier); the usage counts the expanded images as
/v1/tokenize does; Gemma 3's pan-and-scan, asked for in `mm_processor_kwargs`, sends the
crops."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import anthropic
import httpx
import openai
import pytest
import trio
from openai import AsyncOpenAI

from harness.served_gateway import served_gateway
from smg_trio.model.gemma3_images import Gemma3Images
from smg_trio.model.llava_next_images import LlavaNextImages
from smg_trio.model.vision import load_vision
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.worker_specs import WorkerSpec
from tests.backends.grpc_reference import start_engine, stop_engine
from tests.e2e.live_server import LiveServer, live_server
from tests.e2e.test_images import client, image_part, png_uri, received
from tests.model.family_folders import GEMMA3_SETTINGS, gemma3_folder, llava_next_folder

CAP_S: Final = 60.0
SIZES: Final = [(640, 480), (100, 300), (1000, 90)]
GEMMA3_SMALL: Final = {**GEMMA3_SETTINGS, "size": {"height": 56, "width": 56}}
GEMMA3_SEQ: Final = 16

pytestmark = pytest.mark.timeout(180)  # the gRPC test starts two engines and two gateways


def _folder(tmp_path: Path, family: str) -> Path:
    if family == "gemma3":
        return gemma3_folder(tmp_path, settings=GEMMA3_SMALL, seq_length=GEMMA3_SEQ)[0]
    return llava_next_folder(tmp_path)


def _expected(folder: Path, family: str) -> list[tuple[list[int], int]]:
    """Per image of SIZES: its pixel_values shape and its embedded count, from our processor."""
    vision = load_vision(folder, family)
    assert isinstance(vision, LlavaNextImages | Gemma3Images)
    out = []
    for width, height in SIZES:
        data = png_uri(width, height)
        image = vision.process(base64.b64decode(data.split(",", 1)[1]), "image")
        out.append((list(image.fields[0].tensor.shape), image.embed_count))
    return out


def _messages() -> list[Any]:
    return [
        {
            "role": "user",
            "content": [
                image_part(png_uri(*SIZES[0])),
                {"type": "text", "text": "and"},
                image_part(png_uri(*SIZES[1], color=(1, 2, 3))),
                {"type": "text", "text": "What are these?"},
            ],
        },
        {"role": "assistant", "content": "Two pictures."},
        {
            "role": "user",
            "content": [image_part(png_uri(*SIZES[2])), {"type": "text", "text": "?"}],
        },
    ]


@pytest.mark.parametrize("family", ["llava_next", "gemma3"])
async def test_chat_images_reach_the_engine_in_the_familys_fields(
    tmp_path: Path, family: str
) -> None:
    folder = _folder(tmp_path, family)
    expected = _expected(folder, family)
    async with live_server(tmp_path, model_path=folder, max_body_bytes=8 * 1024 * 1024) as server:
        with trio.fail_after(CAP_S):
            async with client(server) as sdk:
                answer = await sdk.chat.completions.create(
                    model=family,
                    messages=_messages(),
                    max_tokens=4,
                    extra_headers={"x-request-id": f"{family}-chat"},
                )
                got = await received(server, f"{family}-chat")
                counted = await _tokenize_count(server, family)
    features = got["mm_features"]
    assert [f["has_data"] for f in features] == [True, True, True]
    for feature, (shape, embedded) in zip(features, expected, strict=True):
        assert feature["shapes"]["pixel_values"] == ["float32", shape]
        if family == "gemma3":
            assert feature["shapes"]["num_patches"] == ["int64", []]
            assert feature["length"] == embedded + 2  # boi, the soft tokens, eoi
        else:
            assert feature["shapes"]["image_sizes"] == ["int64", [2]]
            assert feature["length"] == embedded
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == counted
    assert counted > sum(embedded for _, embedded in expected)


async def _tokenize_count(
    server: LiveServer, family: str, messages: list[Any] | None = None, **extra: Any
) -> int:
    body = {"model": family, "messages": _messages() if messages is None else messages, **extra}
    async with httpx.AsyncClient(
        base_url=server.base_url, headers={"Authorization": f"Bearer {server.api_key}"}
    ) as http:
        reply = await http.post("/v1/tokenize", json=body, timeout=None)
    assert reply.status_code == 200, reply.text
    count: int = reply.json()["count"]
    return count


@pytest.mark.parametrize("family", ["llava_next", "gemma3"])
async def test_messages_and_responses_images_arrive_alike(tmp_path: Path, family: str) -> None:
    folder = _folder(tmp_path, family)
    shape, _ = _expected(folder, family)[0]
    png64 = png_uri(*SIZES[0]).split(",", 1)[1]
    async with live_server(tmp_path, model_path=folder, max_body_bytes=8 * 1024 * 1024) as server:
        sdk = anthropic.AsyncAnthropic(
            base_url=server.base_url, api_key=server.api_key, max_retries=0
        )
        with trio.fail_after(CAP_S):
            async with sdk:
                await sdk.messages.create(
                    model=family,
                    max_tokens=3,
                    messages=[
                        {
                            "role": "user",
                            "content": [
                                {
                                    "type": "image",
                                    "source": {
                                        "type": "base64",
                                        "media_type": "image/png",
                                        "data": png64,
                                    },
                                },
                                {"type": "text", "text": "What is it?"},
                            ],
                        }
                    ],
                    extra_headers={"x-request-id": f"{family}-messages"},
                )
            async with client(server) as oai:
                await oai.responses.create(
                    model=family,
                    max_output_tokens=3,
                    input=[
                        {
                            "role": "user",
                            "content": [
                                {"type": "input_text", "text": "What is it?"},
                                {
                                    "type": "input_image",
                                    "image_url": png_uri(*SIZES[0]),
                                    "detail": "auto",
                                },
                            ],
                        }
                    ],
                    extra_headers={"x-request-id": f"{family}-responses"},
                )
            [first] = (await received(server, f"{family}-messages"))["mm_features"]
            [again] = (await received(server, f"{family}-responses"))["mm_features"]
    assert first["shapes"]["pixel_values"] == ["float32", shape]
    # The same image through the other API: the same identifier, held by the engine.
    assert again["identifier"] == first["identifier"]
    assert (again["has_data"], again["length"]) == (False, first["length"])


async def test_gemma3_pan_and_scan_from_the_request(tmp_path: Path) -> None:
    """640 x 480 past the ratio: the picture and 2 crops, 3 x 16 soft tokens; an unknown key
    is a 400 naming it."""
    folder = _folder(tmp_path, "gemma3")
    async with live_server(tmp_path, model_path=folder, max_body_bytes=8 * 1024 * 1024) as server:
        with trio.fail_after(CAP_S):
            async with client(server) as sdk:
                one: list[Any] = [{"role": "user", "content": [image_part(png_uri(*SIZES[0]))]}]
                kwargs = {"do_pan_and_scan": True}
                answer = await sdk.chat.completions.create(
                    model="gemma3",
                    messages=one,
                    max_tokens=2,
                    extra_body={"mm_processor_kwargs": kwargs},
                    extra_headers={"x-request-id": "pan-and-scan"},
                )
                counted = await _tokenize_count(server, "gemma3", one, mm_processor_kwargs=kwargs)
                plain = await _tokenize_count(server, "gemma3", one)
                [feature] = (await received(server, "pan-and-scan"))["mm_features"]
                with pytest.raises(openai.BadRequestError) as caught:
                    await sdk.chat.completions.create(
                        model="gemma3",
                        messages=_messages()[:1],
                        max_tokens=2,
                        extra_body={"mm_processor_kwargs": {"pan_and_scan_crops": 2}},
                    )
    assert feature["shapes"]["pixel_values"] == ["float32", [3, 3, 56, 56]]
    assert feature["shapes"]["num_patches"] == ["int64", []]
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == counted > 3 * GEMMA3_SEQ
    assert plain < counted - 2 * GEMMA3_SEQ  # without the crops' sequences and their text
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["param"] == "mm_processor_kwargs.pan_and_scan_crops"


@asynccontextmanager
async def _over_grpc(runtime: Runtime, folder: Path, log_path: Path) -> AsyncIterator[str]:
    with log_path.open("wb") as log:
        process, port = await start_engine(
            runtime, log, model_path=folder, extra=("--log-level", "INFO")
        )
        try:
            worker = WorkerSpec(runtime, Wire.GRPC, f"127.0.0.1:{port}")
            config = GatewayConfig(
                model_path=folder, workers=(worker,), port=0, max_body_bytes=8 << 20
            )
            async with served_gateway(config) as served:
                await served.wait_ready(served.serving.gateway.pool.workers)
                yield f"http://127.0.0.1:{served.serving.port}/v1"
        finally:
            await stop_engine(process)


@pytest.mark.parametrize("runtime", [Runtime.VLLM, Runtime.SGLANG])
async def test_over_grpc_gemma3_and_llava_next_of_mixed_tiles_travel(
    runtime: Runtime, tmp_path: Path
) -> None:
    """Gemma 3's flat pictures (with crops) sized by num_patches travel as mm_inputs; LLaVA-NeXT
    images of one tile count travel stacked, of different counts zero-padded to the largest
    (docs/images.md §5.1), each image's own tiles first."""
    gemma_log, llava_log = tmp_path / "gemma3.log", tmp_path / "llava_next.log"
    mixed = [{"role": "user", "content": [image_part(png_uri(*size)) for size in SIZES[:2]]}]
    alike = [{"role": "user", "content": [image_part(png_uri(*SIZES[0], color=c)) for c in [(1, 2, 3), (4, 5, 6)]]}]  # fmt: skip
    with trio.fail_after(2 * CAP_S):
        async with (
            _over_grpc(runtime, _folder(tmp_path / "g", "gemma3"), gemma_log) as base_url,
            AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as sdk,
        ):
            await sdk.chat.completions.create(
                model="gemma3",
                messages=_messages(),
                max_tokens=2,
                extra_body={"mm_processor_kwargs": {"do_pan_and_scan": True}},
            )
        async with (
            _over_grpc(runtime, _folder(tmp_path / "l", "llava_next"), llava_log) as base_url,
            AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as sdk,
        ):
            await sdk.chat.completions.create(model="llava_next", messages=alike, max_tokens=2)
            await sdk.chat.completions.create(model="llava_next", messages=mixed, max_tokens=2)
    assert gemma_log.read_text(errors="replace").count("3 image(s) in mm_inputs") == 1
    assert llava_log.read_text(errors="replace").count("2 image(s) in mm_inputs") == 2
