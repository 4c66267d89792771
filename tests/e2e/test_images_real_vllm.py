"""Opt-in: images through smg-trio to a real headless vLLM EngineCore over ZMQ answer exactly
as vLLM's own server does (docs/images.md §5), and over gRPC through `vllm serve --grpc` (§5.1): greedy text and usage, for image requests of
1 to 3 images of different sizes and modes, multi-turn, a repeated image, streaming too.

    SMG_TRIO_VLLM_VENV=/opt/venvs/vllm SMG_TRIO_VLLM_MODEL=/work/shared/models/tiny-idefics3 \\
        pytest tests/e2e/test_images_real_vllm.py

One vLLM at a time (the machine has two cores): vLLM's own server answers every case first and
is stopped, then the gateway with a headless engine answers them again. The requests go out
through the openai SDK unchanged.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest
from openai import OpenAI
from PIL import Image

from tests.e2e import real_vllm

pytestmark = list(real_vllm.MARKS)

MAX_TOKENS: Final = 12


def _uri(width: int, height: int, mode: str, seed: int, fmt: str = "PNG") -> str:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4}[mode]
    pixels = rng.integers(0, 256, size=(height, width, channels), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels, mode).save(buffer, fmt)
    media = "image/png" if fmt == "PNG" else "image/jpeg"
    return f"data:{media};base64," + base64.b64encode(buffer.getvalue()).decode()


def _image(uri: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": uri}}


SMALL: Final = _uri(64, 48, "RGB", 1)
WIDE: Final = _uri(300, 100, "RGB", 2)
TALL_RGBA: Final = _uri(40, 170, "RGBA", 3)
JPEG: Final = _uri(513, 257, "RGB", 4, "JPEG")

CASES: Final[list[list[dict[str, Any]]]] = [
    [{"role": "user", "content": [_image(SMALL), {"type": "text", "text": "What is this?"}]}],
    [
        {
            "role": "user",
            "content": [_image(WIDE), {"type": "text", "text": "and"}, _image(TALL_RGBA)],
        }
    ],
    [{"role": "user", "content": [_image(SMALL), _image(WIDE), _image(JPEG)]}],
    [
        {"role": "user", "content": [_image(TALL_RGBA), {"type": "text", "text": "Describe."}]},
        {"role": "assistant", "content": "A tall picture."},
        {"role": "user", "content": [{"type": "text", "text": "And now?"}, _image(JPEG)]},
    ],
    [{"role": "user", "content": [{"type": "text", "text": "Again:"}, _image(SMALL)]}],
    [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": [_image(WIDE), {"type": "text", "text": "Colour?"}]},
    ],
]


def _answers(base_url: str) -> list[tuple[str, int, int]]:
    client = OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=120)
    out = []
    for messages in CASES:
        answer = client.chat.completions.create(
            model=real_vllm.SERVED_NAME,
            messages=messages,
            max_tokens=MAX_TOKENS,
            temperature=0.0,
        )
        assert answer.usage is not None
        out.append(
            (
                answer.choices[0].message.content or "",
                answer.usage.prompt_tokens,
                answer.usage.completion_tokens,
            )
        )
    # Streaming: the same text for the first case.
    streamed = client.chat.completions.create(
        model=real_vllm.SERVED_NAME,
        messages=CASES[0],
        max_tokens=MAX_TOKENS,
        temperature=0.0,
        stream=True,
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
    out.append((text, 0, 0))
    return out


def _compared(
    factory: pytest.TempPathFactory, wire: str, engine_env: dict[str, str] | None = None
) -> tuple[list[Any], Path]:
    """vLLM's own server's answers, then smg-trio's over `wire`: equal; the gateway's logs."""
    with real_vllm.vllm_http_server(factory.mktemp("vllm-http")) as url:
        expected = _answers(url)
    logs = factory.mktemp(f"smg-{wire}")
    with real_vllm.smg_trio_in_front_of_vllm(wire, logs, engine_env) as url:
        got = _answers(url)
    assert got == expected, _log_tail(logs)
    return expected, logs


def test_image_answers_equal_vllms_own_server(tmp_path_factory: pytest.TempPathFactory) -> None:
    expected, _ = _compared(tmp_path_factory, "zmq")
    assert all(prompt > 40 for _, prompt, _ in expected[:-1])  # the images' tokens counted


def test_image_answers_over_grpc_equal_vllms_own_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The same cases through `vllm serve --grpc` (smg-grpc-servicer 0.14.0): the images travel as
    processed tensors in `mm_inputs` (docs/images.md §5.1)."""
    _, logs = _compared(tmp_path_factory, "grpc")
    # The servicer took every request (6 cases and the streamed one) as preprocessed tensors.
    servicer_log = (logs / "vllm-grpc.log").read_text(errors="replace")
    assert servicer_log.count("preprocessed_mm=True, media_refs=0") == len(CASES) + 1


def test_image_answers_over_grpc_media_refs_equal_vllms_own_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The same cases through `vllm serve --grpc` with the servicer's worker-side processing on
    (SMG_VLLM_MM_PROCESSOR=inprocess, advertised in GetServerInfo): the images travel as
    `media_refs`, `data:` URIs of the bytes the gateway holds, over the folded prompt, and vLLM's
    own processor expands them (docs/images.md §5.1)."""
    _, logs = _compared(tmp_path_factory, "grpc", {"SMG_VLLM_MM_PROCESSOR": "inprocess"})
    servicer_log = (logs / "vllm-grpc.log").read_text(errors="replace")
    took = re.findall(r"preprocessed_mm=(\w+), media_refs=(\d+)", servicer_log)
    images = [sum(_image_count(m) for m in case) for case in CASES]
    assert took == [("False", str(n)) for n in [*images, images[0]]], took


def _image_count(message: Any) -> int:
    content = message.get("content")
    return 0 if isinstance(content, str) else sum(p.get("type") == "image_url" for p in content)


def _log_tail(folder: Path) -> str:
    return "".join(p.read_text(errors="replace")[-3000:] for p in folder.glob("*.log"))
