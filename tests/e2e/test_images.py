"""Images in, end to end (docs/images.md): the openai SDK sends `image_url` parts (data: URIs)
to a gateway serving a vision model (tests/vision_model: tiny-idefics3's configs, no weights)
in front of the reference vLLM EngineCore, which validates every `mm_features` map it gets and
reports what arrived (`smg_trio_received`). A text-only model, a worker whose wire carries no
image and unreadable images are each a 400 naming the part; nothing malformed reaches the
engine."""

from __future__ import annotations

import base64
import io
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
from PIL import Image

from smg_trio.request.images import DEFAULT_MAX_IMAGE_BYTES
from tests.e2e.image_server import BIG_BYTES, ImageServer, image_server
from tests.e2e.live_server import MODEL, LiveServer, live_server

VISION_MODEL: Final = Path(__file__).parent.parent / "vision_model"
VISION: Final = "vision_model"  # its served name (the folder's)
CAP_S: Final = 30.0
IMAGE_TOKEN_ID: Final = 4097
SEQ_LEN: Final = 4  # image_seq_len: 4 <image> per 56x56 tile


def png_uri(width: int, height: int, color: tuple[int, int, int] = (200, 30, 90)) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, "detail": "auto"}}


@pytest.fixture
async def vision(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(
        tmp_path, model_path=VISION_MODEL, max_body_bytes=8 * 1024 * 1024
    ) as running:
        yield running


def client(server: LiveServer) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=server.base_url + "/v1", api_key=server.api_key, max_retries=0)


async def received(server: LiveServer, request_id: str) -> dict[str, Any]:
    value: dict[str, Any] | None = await server.backend.call_utility(
        "smg_trio_received", request_id
    )
    assert value is not None
    return value


async def test_chat_with_images_reaches_the_engine_as_mm_features(vision: LiveServer) -> None:
    """Two images of different sizes in one message and one in a later turn: three features in
    prompt order, each with its own tensors, spans that hold the expanded placeholders."""
    sizes = [(64, 48), (300, 100), (20, 30)]
    messages: list[Any] = [
        {
            "role": "user",
            "content": [
                image_part(png_uri(*sizes[0])),
                {"type": "text", "text": "and"},
                image_part(png_uri(*sizes[1], color=(1, 2, 3))),
                {"type": "text", "text": "What are these?"},
            ],
        },
        {"role": "assistant", "content": "Two pictures."},
        {
            "role": "user",
            "content": [image_part(png_uri(*sizes[2])), {"type": "text", "text": "?"}],
        },
    ]
    with trio.fail_after(CAP_S):
        async with client(vision) as sdk:
            answer = await sdk.chat.completions.create(
                model=VISION,
                messages=messages,
                max_tokens=4,
                extra_headers={"x-request-id": "img3"},
            )
        got = await received(vision, "img3")
    features = got["mm_features"]
    assert [f["has_data"] for f in features] == [True, True, True]
    # 64x48 and 20x30: 2x2 tiles + global; 300x100: 1x2 + global (the HF processor's split).
    tiles = [5, 3, 5]
    for feature, count in zip(features, tiles, strict=True):
        assert feature["shapes"]["pixel_values"] == ["float32", [count, 3, 56, 56]]
        assert feature["shapes"]["pixel_attention_mask"] == ["int64", [count, 56, 56]]
        assert feature["shapes"]["num_patches"] == ["int64", []]
    offsets = [f["offset"] for f in features]
    assert offsets == sorted(offsets)
    assert len({f["identifier"] for f in features}) == 3
    assert answer.usage is not None
    assert answer.usage.prompt_tokens >= sum(t * SEQ_LEN for t in tiles)


async def test_a_repeated_image_goes_as_data_nil_and_a_cache_miss_is_resent(
    vision: LiveServer,
) -> None:
    """The identifier is a digest of the model, the processor settings and the bytes, so a
    repeat keys the engine's caches the same; the engine holds it, so the repeat carries no
    tensors (`data: nil`) and answers the same. After the engine forgets (vLLM's
    `reset_mm_cache`), the nil is a cache miss and the gateway resends the ADD with data,
    invisibly to the client (docs/images.md §5)."""
    uri = png_uri(64, 48)
    features = []
    texts = []
    with trio.fail_after(CAP_S):
        async with client(vision) as sdk:
            for n in range(3):
                if n == 2:
                    assert await vision.backend.call_utility("reset_mm_cache") is True
                answer = await sdk.chat.completions.create(
                    model=VISION,
                    messages=[{"role": "user", "content": [image_part(uri)]}],
                    max_tokens=4,
                    temperature=0,
                    extra_headers={"x-request-id": f"same{n}"},
                )
                texts.append(answer.choices[0].message.content)
                features.append((await received(vision, f"same{n}"))["mm_features"][0])
            counters = await vision.counters()
    assert len({f["identifier"] for f in features}) == 1
    assert [f["has_data"] for f in features] == [True, False, True]  # the third: resent
    assert texts[0] == texts[1] == texts[2]
    assert counters["requests_rejected"] == 1  # the one cache miss


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("data:image/png;base64,iVBORw0KGgo=", "not an image"),  # a PNG signature alone
        ("data:image/png;base64,bm90IGFuIGltYWdl", "not an image"),
        ("data:image/png;base64,***", "base64 is invalid"),
        ("data:text/plain;base64,aGVsbG8=", "not image/*"),
        ("http://127.0.0.1:9/cat.png", "loopback"),
        ("file:///etc/passwd", "file: URLs are refused"),
    ],
)
async def test_an_unreadable_image_is_a_400_naming_its_part(
    vision: LiveServer, url: str, words: str
) -> None:
    messages: Any = [{"role": "user", "content": [{"type": "text", "text": "hi"}, image_part(url)]}]
    with trio.fail_after(CAP_S):
        async with client(vision) as sdk:
            with pytest.raises(openai.BadRequestError) as caught:
                await sdk.chat.completions.create(model=VISION, messages=messages, max_tokens=2)
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == "messages[0].content[1].image_url"
    assert words in error["message"]


async def test_a_truncated_jpeg_is_a_400(vision: LiveServer) -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), (9, 9, 9)).save(buffer, "JPEG")
    cut = buffer.getvalue()[: len(buffer.getvalue()) // 2]
    uri = "data:image/jpeg;base64," + base64.b64encode(cut).decode()
    with trio.fail_after(CAP_S):
        async with client(vision) as sdk:
            with pytest.raises(openai.BadRequestError, match=r"(?i)truncated"):
                await sdk.chat.completions.create(
                    model=VISION,
                    messages=[{"role": "user", "content": [image_part(uri)]}],
                    max_tokens=2,
                )


async def test_a_huge_png_is_refused_from_its_header(vision: LiveServer) -> None:
    """30,000 x 30,000 pixels in a small PNG (a decompression bomb): a 400 before any pixel
    is decoded."""
    buffer = io.BytesIO()
    Image.new("1", (30_000, 30_000)).save(buffer, "PNG")
    uri = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    with trio.fail_after(CAP_S):
        async with client(vision) as sdk:
            with pytest.raises(openai.BadRequestError, match=r"too large|above the limit"):
                await sdk.chat.completions.create(
                    model=VISION,
                    messages=[{"role": "user", "content": [image_part(uri)]}],
                    max_tokens=2,
                )


async def test_a_text_only_model_refuses_an_image(server: LiveServer) -> None:
    messages: Any = [{"role": "user", "content": [image_part(png_uri(8, 8))]}]
    with trio.fail_after(CAP_S):
        async with client(server) as sdk:
            with pytest.raises(openai.BadRequestError, match="takes text only") as caught:
                await sdk.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["param"] == "messages[0].content[0].image_url"


async def test_a_wire_without_images_refuses_them(tmp_path: Path) -> None:
    """TokenSpeed over ZMQ carries no image (the capability table): a 400 naming the part."""
    from smg_trio.neutral.runtime import Runtime

    async with live_server(
        tmp_path,
        model_path=VISION_MODEL,
        max_body_bytes=1024 * 1024,
        runtime=Runtime.TOKENSPEED,
    ) as running:
        messages: Any = [{"role": "user", "content": [image_part(png_uri(8, 8))]}]
        with trio.fail_after(CAP_S):
            async with client(running) as sdk:
                with pytest.raises(openai.BadRequestError, match="wire carries no image"):
                    await sdk.chat.completions.create(model=VISION, messages=messages, max_tokens=2)


# ---------------------------------------------------------------------------------------------
# Image URLs, fetched safely (docs/images.md §3), from a real HTTP server on loopback.


@asynccontextmanager
async def fetching(tmp_path: Path, *hosts: str) -> AsyncIterator[tuple[LiveServer, ImageServer]]:
    """The vision gateway (allowing `hosts`, if any) and a loopback image server."""
    fields = {"allowed_media_domains": hosts} if hosts else {}
    async with (
        image_server() as images,
        live_server(
            tmp_path,
            model_path=VISION_MODEL,
            max_body_bytes=1024 * 1024,
            config_fields=fields,
        ) as running,
    ):
        yield running, images


async def _ask(server: LiveServer, *urls: str, request_id: str = "fetched") -> Any:
    content = [image_part(url) for url in urls]
    async with client(server) as sdk:
        return await sdk.chat.completions.create(
            model=VISION,
            messages=[{"role": "user", "content": content}],
            max_tokens=2,
            extra_headers={"x-request-id": request_id},
        )


async def test_by_default_a_loopback_url_is_refused_and_never_connected(tmp_path: Path) -> None:
    async with fetching(tmp_path) as (server, images):
        with trio.fail_after(CAP_S), pytest.raises(openai.BadRequestError) as caught:
            await _ask(server, images.url("/img/64x48.png"))
        assert images.connections == 0
    assert isinstance(caught.value.body, dict)
    assert "loopback" in caught.value.body["message"]
    assert caught.value.body["param"] == "messages[0].content[0].image_url"


async def test_an_allowed_host_is_fetched_in_parallel_with_redirects(tmp_path: Path) -> None:
    async with fetching(tmp_path, "127.0.0.1") as (server, images):
        redirect = images.url("/redirect?to=" + images.url("/img/300x100.png"))
        with trio.fail_after(CAP_S):
            await _ask(server, images.url("/img/64x48.png"), redirect, request_id="two")
            got = await received(server, "two")
    assert [f["shapes"]["pixel_values"][1][0] for f in got["mm_features"]] == [5, 3]
    assert images.connections == 3  # two images, one redirect hop


@pytest.mark.parametrize(
    "target", ["http://localhost:{port}/img/8x8.png", "http://169.254.169.254/latest/meta-data/"]
)
async def test_a_redirect_off_the_allowed_hosts_is_refused(tmp_path: Path, target: str) -> None:
    async with fetching(tmp_path, "127.0.0.1") as (server, images):
        url = images.url("/redirect?to=" + target.format(port=images.port))
        with (
            trio.fail_after(CAP_S),
            pytest.raises(openai.BadRequestError, match="allowed-media-domains"),
        ):
            await _ask(server, url)
        assert images.connections == 1  # the redirect itself; never its target


async def test_a_50_mb_image_is_refused_without_reading_it(tmp_path: Path) -> None:
    async with fetching(tmp_path, "127.0.0.1") as (server, images):
        with trio.fail_after(CAP_S), pytest.raises(openai.BadRequestError, match="larger than"):
            await _ask(server, images.url("/big"))
        await trio.sleep(0.2)
        assert images.sent_body_bytes.get("/big", 0) < BIG_BYTES // 2


async def test_an_endless_body_is_cut_at_the_byte_limit(tmp_path: Path) -> None:
    async with fetching(tmp_path, "127.0.0.1") as (server, images):
        with trio.fail_after(CAP_S), pytest.raises(openai.BadRequestError, match="ran past"):
            await _ask(server, images.url("/endless"))
        await trio.sleep(0.2)
        assert images.sent_body_bytes["/endless"] < 2 * DEFAULT_MAX_IMAGE_BYTES


async def test_an_http_error_names_the_part(tmp_path: Path) -> None:
    async with fetching(tmp_path, "127.0.0.1") as (server, images):
        with trio.fail_after(CAP_S), pytest.raises(openai.BadRequestError, match="HTTP 404"):
            await _ask(server, images.url("/img/8x8.png"), images.url("/missing"))


# ---------------------------------------------------------------------------------------------
# Messages (the anthropic SDK) and Responses: the same images, the same engine features.


def _anthropic_turn(*blocks: dict[str, Any]) -> list[Any]:
    return [{"role": "user", "content": list(blocks)}]


async def test_anthropic_image_blocks_base64_and_url(tmp_path: Path) -> None:
    png64 = png_uri(64, 48).split(",", 1)[1]
    base64_block = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": png64},
    }
    async with fetching(tmp_path, "127.0.0.1") as (server, images):
        url_block = {
            "type": "image",
            "source": {"type": "url", "url": images.url("/img/300x100.png")},
        }
        missing = {"type": "image", "source": {"type": "url", "url": images.url("/missing")}}
        sdk = anthropic.AsyncAnthropic(
            base_url=server.base_url, api_key=server.api_key, max_retries=0
        )
        async with sdk:
            with trio.fail_after(CAP_S):
                message = await sdk.messages.create(
                    model=VISION,
                    max_tokens=3,
                    messages=_anthropic_turn(
                        base64_block, {"type": "text", "text": "and"}, url_block
                    ),
                    extra_headers={"x-request-id": "anthropic-images"},
                )
                got = await received(server, "anthropic-images")
                counted = await sdk.messages.count_tokens(
                    model=VISION,
                    messages=_anthropic_turn(
                        base64_block, {"type": "text", "text": "and"}, url_block
                    ),
                )
                with pytest.raises(anthropic.BadRequestError) as caught:
                    await sdk.messages.create(
                        model=VISION,
                        max_tokens=3,
                        messages=_anthropic_turn({"type": "text", "text": "x"}, missing),
                    )
    assert message.usage.input_tokens > 32
    assert counted.input_tokens == message.usage.input_tokens  # images counted as sent
    assert [f["shapes"]["pixel_values"][1][0] for f in got["mm_features"]] == [5, 3]
    assert "messages[0].content[1].source" in str(caught.value)


async def test_responses_input_image(vision: LiveServer) -> None:
    with trio.fail_after(CAP_S):
        async with client(vision) as sdk:
            response = await sdk.responses.create(
                model=VISION,
                max_output_tokens=3,
                input=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_text", "text": "What is it?"},
                            {"type": "input_image", "image_url": png_uri(20, 30), "detail": "auto"},
                        ],
                    }
                ],
                extra_headers={"x-request-id": "responses-image"},
            )
            got = await received(vision, "responses-image")
            with pytest.raises(openai.BadRequestError) as caught:
                await sdk.responses.create(
                    model=VISION,
                    input=[
                        {
                            "role": "user",
                            "content": [
                                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
                            ],
                        }
                    ],
                )
    assert response.usage is not None
    assert response.usage.input_tokens > 20
    assert got["mm_features"][0]["shapes"]["pixel_values"][1][0] == 5
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["param"] == "input[0].content[0].image_url"


async def test_mm_processor_kwargs_are_honoured_or_refused(vision: LiveServer) -> None:
    """vLLM's mm_processor_kwargs: `do_image_splitting: false` sends the global tile alone (1
    tile, fewer prompt tokens, another identifier); a key Idefics3 does not take, or a size
    above the model's, is a 400 naming it, never ignored."""
    messages: Any = [{"role": "user", "content": [image_part(png_uri(64, 48))]}]
    counts, features = [], []
    with trio.fail_after(CAP_S):
        async with client(vision) as sdk:
            for n, kwargs in enumerate([None, {"do_image_splitting": False}]):
                answer = await sdk.chat.completions.create(
                    model=VISION,
                    messages=messages,
                    max_tokens=2,
                    extra_body={} if kwargs is None else {"mm_processor_kwargs": kwargs},
                    extra_headers={"x-request-id": f"kwargs{n}"},
                )
                assert answer.usage is not None
                counts.append(answer.usage.prompt_tokens)
                features.append((await received(vision, f"kwargs{n}"))["mm_features"][0])
            refused = []
            for bad in ({"foo": 1}, {"size": {"longest_edge": 4096}}):
                with pytest.raises(openai.BadRequestError) as caught:
                    await sdk.chat.completions.create(
                        model=VISION,
                        messages=messages,
                        max_tokens=2,
                        extra_body={"mm_processor_kwargs": bad},
                    )
                assert isinstance(caught.value.body, dict)
                refused.append(caught.value.body["param"])
    assert [f["shapes"]["pixel_values"][1][0] for f in features] == [5, 1]
    # The 4 tiles' (<fake>, <row_i_col_j>, 4 x <image>) and 3 newlines are gone.
    assert counts[0] - counts[1] == 4 * (2 + SEQ_LEN) + 3
    assert features[0]["identifier"] != features[1]["identifier"]
    assert refused == ["mm_processor_kwargs.foo", "mm_processor_kwargs.size"]


async def test_more_images_than_the_limit_is_a_400(tmp_path: Path) -> None:
    async with live_server(
        tmp_path,
        model_path=VISION_MODEL,
        max_body_bytes=1024 * 1024,
        config_fields={"limit_mm_per_prompt": 2},
    ) as running:
        uri = png_uri(8, 8)
        with (
            trio.fail_after(CAP_S),
            pytest.raises(openai.BadRequestError, match="at most 2") as caught,
        ):
            await _ask(running, uri, uri, uri)
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["param"] == "messages[0].content[2].image_url"


async def test_tokenize_counts_image_tokens_as_the_prompt_has_them(vision: LiveServer) -> None:
    """/v1/tokenize's chat form expands each image as generation does: its count is the
    chat completion's prompt_tokens (vLLM counts images the same way)."""
    messages: Any = [
        {"role": "user", "content": [image_part(png_uri(64, 48)), {"type": "text", "text": "?"}]}
    ]
    with trio.fail_after(CAP_S):
        async with client(vision) as sdk:
            answer = await sdk.chat.completions.create(
                model=VISION, messages=messages, max_tokens=2
            )
            counted = await sdk.post(
                "/tokenize",
                body={"model": VISION, "messages": messages},
                cast_to=httpx.Response,
            )
    assert answer.usage is not None
    body = counted.json()
    assert body["count"] == answer.usage.prompt_tokens == len(body["tokens"])
    assert body["tokens"].count(IMAGE_TOKEN_ID) == 5 * SEQ_LEN


async def test_tokenize_takes_mm_processor_kwargs_as_chat_does(vision: LiveServer) -> None:
    """vLLM's /tokenize chat form takes mm_processor_kwargs: one tile instead of five, the
    count equal to the chat completion's with the same kwargs; a key the model does not take
    is a 400 naming it; on the prompt form (no images) the field is a 400."""
    messages: Any = [
        {"role": "user", "content": [image_part(png_uri(64, 48)), {"type": "text", "text": "?"}]}
    ]
    kwargs = {"do_image_splitting": False}
    with trio.fail_after(CAP_S):
        async with client(vision) as sdk:
            answer = await sdk.chat.completions.create(
                model=VISION,
                messages=messages,
                max_tokens=2,
                extra_body={"mm_processor_kwargs": kwargs},
            )
            counted = await sdk.post(
                "/tokenize",
                body={"model": VISION, "messages": messages, "mm_processor_kwargs": kwargs},
                cast_to=httpx.Response,
            )
            refused = []
            for extra in ({"messages": messages}, {"prompt": "hi"}):
                with pytest.raises(openai.BadRequestError) as caught:
                    await sdk.post(
                        "/tokenize",
                        body={"model": VISION, **extra, "mm_processor_kwargs": {"foo": 1}},
                        cast_to=httpx.Response,
                    )
                assert isinstance(caught.value.body, dict)
                refused.append(caught.value.body["param"])
    assert answer.usage is not None
    body = counted.json()
    assert body["count"] == answer.usage.prompt_tokens
    assert body["tokens"].count(IMAGE_TOKEN_ID) == SEQ_LEN
    assert refused == ["mm_processor_kwargs.foo", "mm_processor_kwargs"]
