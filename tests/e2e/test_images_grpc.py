"""Images over the gRPC wires, end to end (docs/images.md §5.1): the openai SDK sends `image_url`
parts to `serve` with one gRPC worker, the reference vLLM or SGLang engine serving the vision
model's configs (tests/vision_model). Each reads `mm_inputs` as smg-grpc-servicer 0.14.0's
servicer for it does (a malformed one is INVALID_ARGUMENT: the request fails) and logs how many
images it took; the answer counts the images' tokens. No SGLang runs here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import openai
import pytest
import trio
from openai import AsyncOpenAI

from harness.served_gateway import served_gateway
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.worker_specs import WorkerSpec
from tests.backends.grpc_reference import start_engine, stop_engine
from tests.e2e.test_images import SEQ_LEN, VISION, VISION_MODEL, image_part, png_uri

CAP_S: Final = 60.0

pytestmark = pytest.mark.timeout(90)


@asynccontextmanager
async def vision_over_grpc(runtime: Runtime, log_path: Path) -> AsyncIterator[str]:
    with log_path.open("wb") as log:
        process, port = await start_engine(
            runtime, log, model_path=VISION_MODEL, extra=("--log-level", "INFO")
        )
        try:
            worker = WorkerSpec(runtime, Wire.GRPC, f"127.0.0.1:{port}")
            config = GatewayConfig(
                model_path=VISION_MODEL, workers=(worker,), port=0, max_body_bytes=8 << 20
            )
            async with served_gateway(config) as served:
                await served.wait_ready(served.serving.gateway.pool.workers)
                yield f"http://127.0.0.1:{served.serving.port}/v1"
        finally:
            await stop_engine(process)


def two_turns() -> list[Any]:
    return [
        {
            "role": "user",
            "content": [
                image_part(png_uri(64, 48)),
                {"type": "text", "text": "and"},
                image_part(png_uri(300, 100, color=(1, 2, 3))),
            ],
        },
        {"role": "assistant", "content": "Two pictures."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Now?"}, image_part(png_uri(20, 30))],
        },
    ]


@pytest.mark.parametrize("runtime", [Runtime.VLLM, Runtime.SGLANG])
async def test_images_reach_the_grpc_engine_as_mm_inputs(runtime: Runtime, tmp_path: Path) -> None:
    log_path = tmp_path / "engine.log"
    with trio.fail_after(CAP_S):
        async with (
            vision_over_grpc(runtime, log_path) as base_url,
            AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as sdk,
        ):
            text_only = await sdk.chat.completions.create(
                model=VISION, messages=[{"role": "user", "content": "Now?"}], max_tokens=2
            )
            answer = await sdk.chat.completions.create(
                model=VISION, messages=two_turns(), max_tokens=3, temperature=0
            )
    assert answer.usage is not None
    assert text_only.usage is not None
    assert answer.choices[0].finish_reason == "length"
    # Each image is at least its global tile's SEQ_LEN <image> tokens and its wrappers.
    assert answer.usage.prompt_tokens > text_only.usage.prompt_tokens + 3 * SEQ_LEN
    log = log_path.read_text(errors="replace")
    assert log.count("3 image(s) in mm_inputs") == 1, log[-3000:]


@pytest.mark.parametrize("runtime", [Runtime.TOKENSPEED, Runtime.TRTLLM, Runtime.MLX])
async def test_a_grpc_wire_without_images_names_runtime_and_wire(
    runtime: Runtime, tmp_path: Path
) -> None:
    """The capability table's other gRPC rows: a 400 naming the part, the runtime and the wire,
    and nothing reaches the engine."""
    log_path = tmp_path / "engine.log"
    with trio.fail_after(CAP_S):
        async with (
            vision_over_grpc(runtime, log_path) as base_url,
            AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as sdk,
        ):
            with pytest.raises(openai.BadRequestError) as caught:
                await sdk.chat.completions.create(model=VISION, messages=two_turns(), max_tokens=2)
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["param"] == "messages[0].content[0].image_url"
    assert f"({runtime.value} over grpc: its wire carries no image)" in caught.value.body["message"]
    assert "image(s) in mm_inputs" not in log_path.read_text(errors="replace")
