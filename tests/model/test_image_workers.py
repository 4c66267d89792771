"""model/image_workers.py with real worker processes (the test model's processor): an image
processed in a worker equals the same image processed in this process, bit for bit; a
client's bad image is the same 400; a worker that is gone is replaced on the next image; the
workers run at low priority and are gone after `close`; and through request/images.py, a
request's images run in the pool under the gateway's bound."""

from __future__ import annotations

import io
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import msgspec
import pytest
import trio
from PIL import Image

from smg_trio.core.images import ImageRef
from smg_trio.errors import ClientError
from smg_trio.model.image_worker import NICENESS, ImageJob
from smg_trio.model.image_workers import ImageWorkerFailed, ImageWorkers, PooledImages
from smg_trio.model.vision import ImageProcessor, VisionRefusal, load_vision
from smg_trio.request.images import ImageInputs, ImageLimits, open_image_workers

FOLDER: Final = Path(__file__).resolve().parents[1] / "vision_model"
TEXT_FOLDER: Final = Path(__file__).resolve().parents[1] / "tiny_model"
CAP_S: Final = 60.0


def png(width: int, height: int, mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    colour = (30, 120, 200, 90)[: len(mode)] if mode != "L" else 77
    Image.new(mode, (width, height), colour).save(buffer, "PNG")
    return buffer.getvalue()


def local() -> ImageProcessor:
    vision = load_vision(FOLDER, "m")
    assert vision is not None
    assert not isinstance(vision, VisionRefusal)
    return vision


@pytest.fixture
def workers() -> Iterator[ImageWorkers]:
    pool = ImageWorkers(2)
    try:
        yield pool
    finally:
        pool.close()


def test_an_image_from_a_worker_equals_the_same_image_processed_here(
    workers: ImageWorkers,
) -> None:
    pooled = PooledImages(workers, FOLDER, "m", local().placeholder)
    images = [png(640, 480), png(97, 300, "RGBA"), png(1000, 200, "L")]
    with ThreadPoolExecutor(2) as threads:  # both slots at once
        got = list(threads.map(lambda data: pooled.process(data, "p"), images))
    for data, image in zip(images, got, strict=True):
        assert image == local().process(data, "p")
    options = {"do_image_splitting": False}
    assert pooled.process(images[0], "p", options) == local().process(images[0], "p", options)


def test_a_bad_image_is_the_clients_400_naming_its_part(workers: ImageWorkers) -> None:
    pooled = PooledImages(workers, FOLDER, "m", "<image>")
    with pytest.raises(ClientError) as caught:
        pooled.process(png(64, 64)[:60], "messages[0].content[1].image_url")
    assert caught.value.param == "messages[0].content[1].image_url"
    assert caught.value.code == "invalid_image"
    with pytest.raises(ClientError, match=r"mm_processor_kwargs\.nope"):
        pooled.process(png(64, 64), "p", {"nope": 1})


def test_a_model_without_a_processor_is_the_workers_failure(workers: ImageWorkers) -> None:
    job = ImageJob(folder=str(TEXT_FOLDER), model_id="t", param="p", options=None, data=b"x")
    with pytest.raises(ImageWorkerFailed, match="no image processor") as caught:
        workers.process(job)
    assert caught.value.status == 500


def test_a_worker_that_is_gone_is_replaced_and_workers_run_at_low_priority(
    workers: ImageWorkers,
) -> None:
    pooled = PooledImages(workers, FOLDER, "m", "<image>")
    first = pooled.process(png(64, 64), "p")
    (pid,) = workers.pids()
    assert os.getpriority(os.PRIO_PROCESS, pid) == NICENESS
    os.kill(pid, signal.SIGKILL)
    # Until the kernel has ended it (its socket closed), left unreaped for the pool to find:
    # a SIGKILL always ends a process, and the test's time cap bounds the wait.
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    assert pooled.process(png(64, 64), "p") == first
    assert workers.pids()
    assert pid not in workers.pids()
    pids = workers.pids()
    workers.close()
    assert workers.pids() == ()
    for gone in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(gone, 0)
    with pytest.raises(ImageWorkerFailed, match="shutting down"):
        pooled.process(png(64, 64), "p")


async def test_a_requests_images_run_in_the_pool() -> None:
    data = png(200, 150)
    uri = "data:image/png;base64," + __import__("base64").b64encode(data).decode()
    with trio.fail_after(CAP_S):
        async with open_image_workers(2) as workers:
            inputs = ImageInputs(PooledImages(workers, FOLDER, "m", "<image>"))
            got = await inputs.resolve([ImageRef(f"p{i}", uri) for i in range(3)])
            assert len(workers.pids()) >= 1
            pids = workers.pids()
        assert workers.pids() == ()
    # The same image as processed here, with the client's data: URI as its source (for a
    # worker that processes images itself, docs/images.md §5.1).
    assert got == tuple(
        msgspec.structs.replace(local().process(data, f"p{i}"), source=uri) for i in range(3)
    )
    for gone in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(gone, 0)


async def test_a_data_uri_is_decoded_in_the_worker_under_the_per_image_limit() -> None:
    data = png(300, 300)
    uri = "data:image/png;base64," + __import__("base64").b64encode(data).decode()
    with trio.fail_after(CAP_S):
        async with open_image_workers(1) as workers:
            pooled = PooledImages(workers, FOLDER, "m", "<image>")
            small = ImageInputs(pooled, ImageLimits(max_image_bytes=len(data) // 2))
            with pytest.raises(ClientError, match="larger than") as caught:
                await small.resolve([ImageRef("p0", uri)])
            assert caught.value.param == "p0"
            with pytest.raises(ClientError) as bad:
                await ImageInputs(pooled).resolve([ImageRef("p1", "data:image/png;base64,@@")])
            assert bad.value.param == "p1"
            assert len(workers.pids()) == 1  # refusals, not deaths: the same worker


def test_a_worker_that_does_not_answer_in_the_requests_time_is_killed(
    workers: ImageWorkers,
) -> None:
    """The request's time left bounds its wait: past it the worker (busy, hung or starved) is
    killed and the image is a 500; the next image gets a new worker."""
    pooled = PooledImages(workers, FOLDER, "m", "<image>")
    pooled.process(png(64, 64), "p")  # spawned and loaded
    (pid,) = workers.pids()
    big = png(4000, 3000)
    started = time.monotonic()
    with pytest.raises(ImageWorkerFailed, match="did not answer"):
        pooled.process(big, "p", budget_s=0.0)
    assert time.monotonic() - started < 5.0
    assert pid not in workers.pids()
    assert pooled.process(png(64, 64), "p") == local().process(png(64, 64), "p")
