"""Images as vLLM gRPC `media_refs`, end to end (docs/images.md §5.1): `serve` with one gRPC
worker, the reference vLLM engine started with `--mm-processor inprocess` (so it advertises
`mm_processor` and `mm_media_ref_schemes` in GetServerInfo, as smg-grpc-servicer 0.14.0 does)
serving a Qwen2-VL folder (tests/model/qwen2_vl_folder.py), whose tensors cannot travel as
`mm_inputs`. The engine expands each anchor as the servicer's processor does and logs what it
took: the refs are `data:` URIs only (an image URL is fetched here, under our rules, never by
the worker), and its expanded prompt is the one we counted. Without `--mm-processor` the same
request is the 400 it always was; a request's `mm_processor_kwargs` (which refs cannot carry)
sends the tensors."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx
import openai
import pytest
import trio
from openai import AsyncOpenAI

from harness.served_gateway import served_gateway
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.worker_specs import WorkerSpec
from tests.backends.grpc_reference import start_engine, stop_engine
from tests.e2e.image_server import image_server
from tests.e2e.test_images import VISION, VISION_MODEL, image_part, png_uri
from tests.model.qwen2_vl_folder import qwen_folder

CAP_S: Final = 60.0
MODEL: Final = "qwen2_vl"
TOOK: Final = re.compile(r"(\d+) image\(s\) in media_refs \(([a-z,]+)\), prompt (\d+) -> (\d+)")

pytestmark = pytest.mark.timeout(120)


@asynccontextmanager
async def qwen_over_grpc(
    tmp_path: Path, log_path: Path, engine_flags: Sequence[str], model_path: Path | None = None
) -> AsyncIterator[str]:
    folder = model_path or qwen_folder(tmp_path, MODEL)
    with log_path.open("wb") as log:
        process, port = await start_engine(
            Runtime.VLLM, log, model_path=folder, extra=("--log-level", "INFO", *engine_flags)
        )
        try:
            worker = WorkerSpec(Runtime.VLLM, Wire.GRPC, f"127.0.0.1:{port}")
            config = GatewayConfig(
                model_path=folder,
                workers=(worker,),
                port=0,
                max_body_bytes=8 << 20,
                allowed_media_domains=("127.0.0.1",),
            )
            async with served_gateway(config) as served:
                await served.wait_ready(served.serving.gateway.pool.workers)
                yield f"http://127.0.0.1:{served.serving.port}/v1"
        finally:
            await stop_engine(process)


def _messages(*urls: str) -> list[Any]:
    return [
        {"role": "user", "content": [image_part(urls[0]), {"type": "text", "text": "and"}]},
        {"role": "assistant", "content": "One picture."},
        {
            "role": "user",
            "content": [*(image_part(u) for u in urls[1:]), {"type": "text", "text": "?"}],
        },
    ]


async def test_a_worker_that_processes_images_gets_data_refs_and_runs_our_prompt(
    tmp_path: Path,
) -> None:
    log_path = tmp_path / "engine.log"
    with trio.fail_after(CAP_S):
        async with (
            image_server() as images,
            qwen_over_grpc(tmp_path, log_path, ("--mm-processor", "inprocess")) as base_url,
            AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as sdk,
        ):
            messages = _messages(png_uri(300, 200), images.url("/img/64x48.png"))
            answer = await sdk.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=3, temperature=0
            )
            counted = await sdk.post(
                "/tokenize",
                body={"model": MODEL, "messages": messages},
                cast_to=httpx.Response,
            )
    assert answer.usage is not None
    assert answer.choices[0].finish_reason == "length"
    assert images.connections == 2  # the gateway fetched it (chat, tokenize); the worker never
    took = TOOK.findall(log_path.read_text(errors="replace"))
    assert len(took) == 1, took
    count, schemes, folded, expanded = took[0]
    assert (count, schemes) == ("2", "data")
    assert int(expanded) == answer.usage.prompt_tokens == counted.json()["count"]
    assert int(folded) < int(expanded)


async def test_without_the_workers_processor_qwen_images_are_a_400(tmp_path: Path) -> None:
    log_path = tmp_path / "engine.log"
    with trio.fail_after(CAP_S):
        async with (
            qwen_over_grpc(tmp_path, log_path, ()) as base_url,
            AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as sdk,
        ):
            with pytest.raises(openai.BadRequestError) as caught:
                await sdk.chat.completions.create(
                    model=MODEL, messages=_messages(png_uri(300, 200)), max_tokens=2
                )
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "multimodal_not_supported"
    assert "media_refs" not in log_path.read_text(errors="replace")


async def test_mm_processor_kwargs_send_the_tensors(tmp_path: Path) -> None:
    """Refs carry no processor settings (the servicer passes none): an Idefics3 request with
    `mm_processor_kwargs` goes as `mm_inputs` to the same worker, one without as refs."""
    log_path = tmp_path / "engine.log"
    with trio.fail_after(CAP_S):
        async with (
            qwen_over_grpc(
                tmp_path, log_path, ("--mm-processor", "inprocess"), VISION_MODEL
            ) as base_url,
            AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as sdk,
        ):
            messages = _messages(png_uri(64, 48))
            plain = await sdk.chat.completions.create(model=VISION, messages=messages, max_tokens=2)
            single = await sdk.chat.completions.create(
                model=VISION,
                messages=messages,
                max_tokens=2,
                extra_body={"mm_processor_kwargs": {"do_image_splitting": False}},
            )
    log = log_path.read_text(errors="replace")
    took = TOOK.findall(log)
    assert len(took) == 1, took
    assert log.count("1 image(s) in mm_inputs") == 1
    assert plain.usage is not None
    assert single.usage is not None
    assert int(took[0][3]) == plain.usage.prompt_tokens > single.usage.prompt_tokens
