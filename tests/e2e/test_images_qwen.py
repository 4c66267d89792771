"""Qwen-VL images end to end over ZMQ (docs/images.md §4.2): a gateway serving a Qwen2-VL folder
(tests/model/qwen2_vl_folder.py: the test tokenizer, Qwen2-VL's processor settings, no weights)
in front of the reference vLLM EngineCore, which validates every `mm_features` map it gets and
reports it (`smg_trio_received`). The engines' `--mm-device-do-normalize` decides the pixels
(raw uint8 by vLLM's default, normalised float32 when off), and a request's
`mm_processor_kwargs` pixel bounds change the image's tokens, the answer's usage and
/v1/tokenize's count alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import httpx
import openai
import pytest
import trio

from tests.e2e.live_server import LiveServer, live_server
from tests.e2e.test_images import client, image_part, png_uri, received
from tests.model.qwen2_vl_folder import qwen_folder

CAP_S: Final = 60.0
MODEL: Final = "qwen2_vl"  # the folder's name, its served name
MESSAGES: Final[Any] = [
    {"role": "user", "content": [image_part(png_uri(300, 200)), {"type": "text", "text": "?"}]}
]


async def _ask(server: LiveServer, request_id: str, **body: Any) -> tuple[int, dict[str, Any]]:
    """The prompt tokens of a chat completion of MESSAGES, and the feature the engine got."""
    async with client(server) as sdk:
        answer = await sdk.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=2,
            extra_body=body,
            extra_headers={"x-request-id": request_id},
        )
    assert answer.usage is not None
    (feature,) = (await received(server, request_id))["mm_features"]
    return answer.usage.prompt_tokens, feature


@pytest.mark.parametrize(("setting", "dtype"), [(None, "uint8"), (False, "float32")])
async def test_the_engines_setting_decides_the_pixels(
    tmp_path: Path, setting: bool | None, dtype: str
) -> None:
    folder = qwen_folder(tmp_path, "qwen2_vl")
    fields = {} if setting is None else {"mm_device_do_normalize": setting}
    async with live_server(
        tmp_path, model_path=folder, max_body_bytes=4 * 1024 * 1024, config_fields=fields
    ) as server:
        with trio.fail_after(CAP_S):
            _, feature = await _ask(server, "pixels")
    assert feature["shapes"]["pixel_values"][0] == dtype
    assert feature["shapes"]["image_grid_thw"][0] == "int64"


async def test_pixel_bounds_in_mm_processor_kwargs_change_the_count_everywhere(
    tmp_path: Path,
) -> None:
    """`max_pixels` below the model's: fewer patches reach the engine, fewer prompt tokens,
    /v1/tokenize counts the same; a key Qwen-VL does not take is a 400 naming it."""
    folder = qwen_folder(tmp_path, "qwen2_vl")
    small = {"mm_processor_kwargs": {"max_pixels": 28 * 28 * 8}}
    async with live_server(tmp_path, model_path=folder, max_body_bytes=4 * 1024 * 1024) as server:
        with trio.fail_after(CAP_S):
            full, full_feature = await _ask(server, "full")
            fewer, fewer_feature = await _ask(server, "fewer", **small)
            async with client(server) as sdk:
                counted = await sdk.post(
                    "/tokenize",
                    body={"model": MODEL, "messages": MESSAGES, **small},
                    cast_to=httpx.Response,
                )
                with pytest.raises(openai.BadRequestError) as caught:
                    await sdk.chat.completions.create(
                        model=MODEL,
                        messages=MESSAGES,
                        max_tokens=2,
                        extra_body={"mm_processor_kwargs": {"fps": 2}},
                    )
    patches = [f["shapes"]["pixel_values"][1][0] for f in (full_feature, fewer_feature)]
    assert patches[0] > patches[1]
    assert full - fewer == (patches[0] - patches[1]) // 4  # merge_size 2: 4 patches a token
    assert counted.status_code == 200
    assert counted.json()["count"] == fewer
    assert full_feature["identifier"] != fewer_feature["identifier"]
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["param"] == "mm_processor_kwargs.fps"
