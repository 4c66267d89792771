"""request/images.py on real sockets (a loopback image server, the test model's processor):
a fetch that never answers ends at the per-image deadline as a 400; a request that is cancelled
(its client left) cancels its fetches, whose connections close; file: URLs are read only under
the allowed folder, after their symlinks are resolved; the first failing part cancels the others."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Final

import pytest
import trio
from PIL import Image

from smg_trio.core.images import ImageRef
from smg_trio.core.media_addresses import MediaPolicy
from smg_trio.errors import ClientError
from smg_trio.model.vision import load_vision
from smg_trio.request.images import ImageInputs, ImageLimits
from tests.e2e.image_server import image_server

FOLDER: Final = Path(__file__).resolve().parents[1] / "vision_model"
CAP_S: Final = 20.0


def inputs(**limits: object) -> ImageInputs:
    return ImageInputs(load_vision(FOLDER, "m"), ImageLimits(**limits))  # type: ignore[arg-type]


LOOPBACK: Final = MediaPolicy(allowed_domains=("127.0.0.1",))


async def test_a_fetch_that_never_answers_ends_at_its_deadline() -> None:
    async with image_server() as server:
        with (
            trio.fail_after(CAP_S),
            pytest.raises(ClientError, match=r"longer than 1\.0 s") as caught,
        ):
            await inputs(fetch_timeout_s=1.0, policy=LOOPBACK).resolve(
                [ImageRef("messages[0].content[0].image_url", server.url("/hang"))]
            )
        with trio.fail_after(CAP_S):
            await server.hung_up.wait()  # its connection was closed, not left open
    assert caught.value.param == "messages[0].content[0].image_url"


async def test_a_client_that_leaves_cancels_the_fetches() -> None:
    async with image_server() as server:
        refs = [ImageRef(f"p{i}", server.url("/hang")) for i in range(3)]
        server.hangs_wanted = 3
        with trio.fail_after(CAP_S):
            async with trio.open_nursery() as request:  # the request's scope
                request.start_soon(inputs(policy=LOOPBACK).resolve, refs)
                await server.all_hanging.wait()  # fetched in parallel: all three asked
                request.cancel_scope.cancel()  # as when its client leaves
            await server.hung_up.wait()


async def test_a_failing_part_cancels_its_siblings() -> None:
    """One bad image is the 400 at once: the others' fetches are cancelled, not awaited."""
    async with image_server() as server:
        refs = [
            ImageRef("a", server.url("/hang")),
            ImageRef("b", server.url("/missing-after-hang")),
        ]
        with trio.fail_after(CAP_S):
            with pytest.raises(ClientError) as caught:
                await inputs(policy=LOOPBACK).resolve(refs)
            await server.hung_up.wait()
    assert caught.value.param == "b"


def _png(path: Path) -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (20, 30)).save(buffer, "PNG")
    path.write_bytes(buffer.getvalue())


async def test_file_urls_only_under_the_allowed_folder(tmp_path: Path) -> None:
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    _png(allowed / "a.png")
    _png(outside / "b.png")
    (allowed / "link.png").symlink_to(outside / "b.png")  # resolves outside: refused
    images = inputs(policy=MediaPolicy(allowed_local_path=str(allowed.resolve())))
    with trio.fail_after(CAP_S):
        [image] = await images.resolve([ImageRef("p", f"file://{allowed / 'a.png'}")])
        assert image.embed_count == 20
        for name in (outside / "b.png", allowed / "link.png"):
            with pytest.raises(ClientError, match="outside --allowed-local-media-path"):
                await images.resolve([ImageRef("p", f"file://{name}")])
    with trio.fail_after(CAP_S), pytest.raises(ClientError, match="file: URLs are refused"):
        await inputs().resolve([ImageRef("p", f"file://{allowed / 'a.png'}")])
