"""I/O. A request's images made ready for its prompt: their bytes obtained and the model's
processor run on each, in parallel, under the request's scope (docs/images.md §3).

`ImageInputs.resolve(refs)` runs one task per image in a nursery of its own, inside the
request's cancel scope: a client that leaves, or the request deadline, cancels every fetch
still running; the first image to fail is the 400 (the lowest-numbered part when several
failed together), and its siblings are cancelled. Processing (decode, resize, normalise: CPU)
is bounded by one `CapacityLimiter` for the whole gateway, so a burst of images queues instead
of multiplying the work; `smg-trio serve` runs it in worker processes at low priority
(`open_image_workers`, model/image_workers.py), so text streams never wait behind an image for
the GIL or a core; without them (tests, benches) it runs on worker threads.

Where the bytes come from: a `data:` URI is decoded here (wire/data_uri.py); an http(s) or
allowed file: URL is fetched (request/media_fetch.py) under its own deadline, against the
per-image and per-request byte limits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

import msgspec
import trio

from smg_trio.core.images import ImageRef, ProcessedImage
from smg_trio.core.media_addresses import MediaPolicy
from smg_trio.errors import ClientError
from smg_trio.model.folder import ModelDir
from smg_trio.model.image_workers import ImageWorkers, PooledImages, pooled_vision
from smg_trio.model.vision import ImageProcessor, VisionRefusal
from smg_trio.request.media_fetch import fetch_media
from smg_trio.wire.data_uri import canonical_data_uri, data_uri_of, image_data, is_data_uri

DEFAULT_MAX_IMAGES: Final = 16  # per request (vLLM: --limit-mm-per-prompt; docs/images.md §3)
DEFAULT_MAX_IMAGE_BYTES: Final = 20 * 1024 * 1024
# Images processed at once by the whole gateway (worker processes, or threads without them).
DEFAULT_PROCESSING_THREADS: Final = 2
CLOSE_WORKERS_S: Final = 5.0


DEFAULT_MAX_REQUEST_IMAGE_BYTES: Final = 64 * 1024 * 1024
DEFAULT_FETCH_TIMEOUT_S: Final = 10.0  # per image URL, redirects included (vLLM: 5 s)


@dataclass(frozen=True)
class ImageLimits:
    max_images: int = DEFAULT_MAX_IMAGES  # --limit-mm-per-prompt
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    max_request_bytes: int = DEFAULT_MAX_REQUEST_IMAGE_BYTES  # all images of one request
    fetch_timeout_s: float = DEFAULT_FETCH_TIMEOUT_S
    policy: MediaPolicy = field(default_factory=MediaPolicy)  # core/media_addresses.py


class ImageInputs:
    """The gateway's image path for one model: its processor (or why images are refused)."""

    def __init__(
        self,
        vision: ImageProcessor | VisionRefusal | None,
        limits: ImageLimits | None = None,
        *,
        limiter: trio.CapacityLimiter | None = None,
    ) -> None:
        self.vision = vision
        self.limits = limits or ImageLimits()
        # One limiter for every model's images (the gateway's), so more vision models do not
        # mean more processing threads; its own when none is given.
        self._limiter = limiter or trio.CapacityLimiter(DEFAULT_PROCESSING_THREADS)

    async def resolve(
        self, refs: Sequence[ImageRef], options: Mapping[str, Any] | None = None
    ) -> tuple[ProcessedImage, ...]:
        """Every image of `refs` processed, in order, with the request's `mm_processor_kwargs`
        (`options`); a 400 naming the first that fails."""
        if not refs:
            return ()
        processor = self._processor(refs[0])
        if len(refs) > self.limits.max_images:
            raise ClientError(
                f"{len(refs)} images in one request; at most {self.limits.max_images} are "
                "taken (--limit-mm-per-prompt)",
                param=refs[self.limits.max_images].param,
            )
        fetched = [0]  # this request's fetched bytes, all images together
        results: list[ProcessedImage | None] = [None] * len(refs)
        errors: list[tuple[int, ClientError]] = []
        async with trio.open_nursery() as nursery:
            for index, ref in enumerate(refs):
                nursery.start_soon(
                    self._one,
                    processor,
                    options,
                    index,
                    ref,
                    results,
                    errors,
                    fetched,
                    nursery.cancel_scope,
                )
        if errors:
            raise min(errors, key=lambda pair: pair[0])[1]
        return tuple(image for image in results if image is not None)

    def _processor(self, first: ImageRef) -> ImageProcessor:
        vision = self.vision
        if vision is None:
            raise ClientError(
                f"{first.param}: this model takes text only",
                code="multimodal_not_supported",
                param=first.param,
            )
        if isinstance(vision, VisionRefusal):
            raise ClientError(
                f"{first.param}: {vision.reason}",
                code="multimodal_not_supported",
                param=first.param,
            )
        return vision

    async def _one(
        self,
        processor: ImageProcessor,
        options: Mapping[str, Any] | None,
        index: int,
        ref: ImageRef,
        results: list[ProcessedImage | None],
        errors: list[tuple[int, ClientError]],
        fetched: list[int],
        scope: trio.CancelScope,
    ) -> None:
        try:
            data: bytes | None = None
            if is_data_uri(ref.url):  # decoded off the loop too: megabytes of base64
                work = partial(self._data_uri_image, processor, options, ref, _time_left())
            else:
                data = await self._bytes(ref, fetched)
                work = partial(processor.process, data, ref.param, options)
                if isinstance(processor, PooledImages):  # its worker bounded by our deadline
                    work = partial(
                        processor.process, data, ref.param, options, budget_s=_time_left()
                    )
            if not options:  # a worker that processes images itself may take it as its source
                work = partial(_with_source, work, ref.url, data)
            results[index] = await trio.to_thread.run_sync(work, limiter=self._limiter)
        except ClientError as error:  # (from a worker thread too: its traceback dropped)
            errors.append((index, error.with_traceback(None)))
            scope.cancel()

    def _data_uri_image(
        self,
        processor: ImageProcessor,
        options: Mapping[str, Any] | None,
        ref: ImageRef,
        budget_s: float | None,
    ) -> ProcessedImage:
        max_bytes = self.limits.max_image_bytes
        if isinstance(processor, PooledImages):  # the worker process decodes it
            return processor.process_data_uri(
                ref.url, ref.param, options, max_bytes=max_bytes, budget_s=budget_s
            )
        return processor.process(
            image_data(ref.url, ref.param, max_bytes=max_bytes), ref.param, options
        )

    async def _bytes(self, ref: ImageRef, fetched: list[int]) -> bytes:
        limits = self.limits
        with trio.move_on_after(limits.fetch_timeout_s) as scope:
            data = await fetch_media(
                ref.url,
                limits.policy,
                max_bytes=min(limits.max_image_bytes, limits.max_request_bytes),
                param=ref.param,
            )
        if scope.cancelled_caught:
            raise ClientError(
                f"{ref.param}: fetching the image took longer than {limits.fetch_timeout_s} s",
                code="invalid_image_url",
                param=ref.param,
            )
        fetched[0] += len(data)
        if fetched[0] > limits.max_request_bytes:
            raise ClientError(
                f"{ref.param}: the request's images are larger than "
                f"{limits.max_request_bytes} bytes together",
                code="invalid_image_url",
                param=ref.param,
            )
        return data


def _with_source(
    work: Callable[[], ProcessedImage], url: str, fetched: bytes | None
) -> ProcessedImage:
    """`work`'s image with its `source` (docs/images.md §5.1): the client's own `data:` URI, or
    the bytes we fetched (under our rules, §3) as one; run in the worker thread (base64)."""
    image = work()
    source = canonical_data_uri(url) if fetched is None else data_uri_of(fetched)
    return msgspec.structs.replace(image, source=source)


def _time_left() -> float | None:
    """The time the calling task's deadline leaves (None: it has none): a worker process is
    killed past it, so a worker that never answers never holds its request's thread longer."""
    deadline = trio.current_effective_deadline()
    return None if deadline == float("inf") else max(0.0, deadline - trio.current_time())


def image_inputs_by_model(
    folders: Mapping[str, ModelDir],
    limits: ImageLimits | None,
    workers: ImageWorkers | None,
    mm_device_do_normalize: bool | None,
) -> dict[str, ImageInputs]:
    """Each served model's image inputs (its processor, or why it has none), by the model's
    key (`folders`: each key's model folder); one bound for all of them: the worker processes' count when
    `workers` runs them, else threads. `mm_device_do_normalize`: the engines' setting
    (docs/images.md §4.2; None: vLLM's default)."""
    processing = trio.CapacityLimiter(
        DEFAULT_PROCESSING_THREADS if workers is None else workers.size
    )
    return {
        key: ImageInputs(
            pooled_vision(folder, workers, mm_device_do_normalize), limits, limiter=processing
        )
        for key, folder in folders.items()
    }


@asynccontextmanager
async def open_image_workers(
    size: int = DEFAULT_PROCESSING_THREADS,
) -> AsyncIterator[ImageWorkers]:
    """The gateway's image worker processes (spawned on first use), killed on exit."""
    workers = ImageWorkers(size)
    try:
        yield workers
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_WORKERS_S):
            await trio.to_thread.run_sync(workers.close)
