"""CPU (a child process). One image-processing worker: takes jobs from its socket, runs the
model's processor on each and answers with the processed image (docs/images.md §3).

    python -m smg_trio.model.image_worker FD

`FD` is its end of a socket pair the gateway made (model/image_workers.py). Once it has loaded
a model's processor (the imports: seconds of CPU, at the gateway's priority) it lowers its own
scheduling priority (nice 10), so on a busy machine the gateway's event loop and the engines
run first: text streams never wait behind an image for a core, and, being a process, it never
holds the gateway's GIL. Not 19: at load ~12 on 2 cores, requests waited on nice-19 workers
past the tests' 120 s cap (docs/images.md §3). It ends when the gateway closes its end.

The exchange, each message an 8-byte little-endian length and its msgpack body:
- job: `ImageJob` (the model's folder and id, the part's name, the request's
  `mm_processor_kwargs`, the image's bytes or its `data:` URI);
- answer: `ImageAnswer`, the processed image with every tensor's data left empty, then each
  tensor's raw bytes in field order (no msgpack around them: the gateway reads them straight
  into the bytes objects it sends on, with its GIL released), or the refusal, or the failure.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any, Final

import msgspec

from smg_trio.core.images import ProcessedImage
from smg_trio.errors import ClientError
from smg_trio.model.vision import ImageProcessor, VisionRefusal, load_vision
from smg_trio.wire.data_uri import image_data

NICENESS: Final = 10
LENGTH_BYTES: Final = 8
MAX_MODELS: Final = 16  # processors kept per worker, by (folder, model id)


class ImageJob(msgspec.Struct, frozen=True, kw_only=True):
    """An image's bytes, or its `data:` URI (decoded here: base64 holds the GIL) with the
    per-image limit its bytes must keep."""

    folder: str
    model_id: str
    param: str
    options: dict[str, Any] | None
    device_normalize: bool | None = None  # the engines' --mm-device-do-normalize (None: default)
    data: bytes = b""
    data_uri: str | None = None
    max_bytes: int = 0


class ImageAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """Exactly one of: `image` (its tensors' data follow, `sizes` bytes each), `refusal` (a 400:
    the client's image), `failure` (the worker's own fault)."""

    image: ProcessedImage | None = None
    sizes: tuple[int, ...] = ()
    refusal: str | None = None
    code: str | None = None
    param: str | None = None
    failure: str | None = None


def framed(body: bytes) -> bytes:
    return len(body).to_bytes(LENGTH_BYTES, "little") + body


def bare(image: ProcessedImage) -> tuple[ProcessedImage, list[bytes]]:
    """`image` with its tensors' data taken out (to travel after the header), and that data."""
    datas = [field.tensor.data for field in image.fields]
    fields = tuple(
        msgspec.structs.replace(field, tensor=msgspec.structs.replace(field.tensor, data=b""))
        for field in image.fields
    )
    return msgspec.structs.replace(image, fields=fields), datas


def received_exactly(sock: socket.socket, size: int) -> bytes:
    """`size` bytes from `sock` (blocking), as one bytes object; EOFError if it closes first."""
    if size == 0:
        return b""
    data = sock.recv(size, socket.MSG_WAITALL)
    if len(data) == size:
        return data
    if not data:
        raise EOFError("the peer closed the connection")
    buffer = bytearray(data)  # a signal interrupted the wait: go on piecewise
    while len(buffer) < size:
        more = sock.recv(size - len(buffer))
        if not more:
            raise EOFError("the peer closed the connection")
        buffer += more
    return bytes(buffer)


def received_message(sock: socket.socket) -> bytes:
    size = int.from_bytes(received_exactly(sock, LENGTH_BYTES), "little")
    return received_exactly(sock, size)


class _Worker:
    def __init__(self) -> None:
        self._processors: dict[
            tuple[str, str, bool | None], ImageProcessor | VisionRefusal | None
        ] = {}

    def answer(self, job: ImageJob) -> tuple[ImageAnswer, list[bytes]]:
        try:
            processor = self._processor(job.folder, job.model_id, job.device_normalize)
            data = job.data
            if job.data_uri is not None:
                data = image_data(job.data_uri, job.param, max_bytes=job.max_bytes)
            image = processor.process(data, job.param, job.options)
        except ClientError as error:
            return ImageAnswer(refusal=error.message, code=error.code, param=error.param), []
        except Exception as exc:  # the worker's fault, not the image's: the gateway says 500
            return ImageAnswer(failure=f"{type(exc).__name__}: {exc}"), []
        header, datas = bare(image)
        return ImageAnswer(image=header, sizes=tuple(len(d) for d in datas)), datas

    def _processor(
        self, folder: str, model_id: str, device_normalize: bool | None
    ) -> ImageProcessor:
        key = (folder, model_id, device_normalize)
        if key not in self._processors:
            if len(self._processors) >= MAX_MODELS:
                self._processors.clear()
            self._processors[key] = load_vision(
                Path(folder), model_id, device_normalize=device_normalize
            )
        if os.getpriority(os.PRIO_PROCESS, 0) < NICENESS:  # loaded: process behind the text
            os.setpriority(os.PRIO_PROCESS, 0, NICENESS)
        processor = self._processors[key]
        if processor is None or isinstance(processor, VisionRefusal):
            raise RuntimeError(f"no image processor for {model_id!r} in {folder}")
        return processor


def serve(sock: socket.socket) -> None:
    """Jobs until the gateway closes its end."""
    worker = _Worker()
    decoder = msgspec.msgpack.Decoder(ImageJob)
    encoder = msgspec.msgpack.Encoder()
    while True:
        try:
            job = decoder.decode(received_message(sock))
        except EOFError:
            return
        answer, datas = worker.answer(job)
        sock.sendall(framed(encoder.encode(answer)))
        for data in datas:
            sock.sendall(data)


def main(argv: list[str]) -> int:
    with socket.socket(fileno=int(argv[0])) as sock:
        try:
            serve(sock)
        except (BrokenPipeError, ConnectionResetError):  # the gateway went away mid-answer
            return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
