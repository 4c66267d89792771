"""CPU (blocking; call it from worker threads). The gateway's pool of image-processing
processes (model/image_worker.py) and the `ImageProcessor` that hands a model's images to it
(docs/images.md §3).

Why processes, measured (bench/RESULTS.md "Images"): processing in the gateway's own threads
holds its GIL in the parts numpy and Pillow do not release (copies into the tensors' bytes, the
processor's Python) and takes the cores its event loop and the engines need; text streams' ITL
rose with 16 image requests in flight. A worker process at nice 10 takes neither: the OS runs
the gateway and the engines first, and the tensors come back over a Unix socket as raw bytes
read in one `recv` with the GIL released (no pickling).

`ImageWorkers(size)` holds `size` slots, each one worker process and its socket, spawned on
first use and again after a worker died. A caller thread takes a free slot for one exchange;
the caller bounds how many run at once (request/images.py's `CapacityLimiter`, of the same
size), so a slot is always free. `close()` kills every worker (they hold nothing to save).
`pooled_vision(folder, workers, device_normalize)`: a model folder's image processing, through
the pool when there is one.
"""

from __future__ import annotations

import queue
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

from smg_trio.core.images import ProcessedImage
from smg_trio.errors import ClientError, GatewayError
from smg_trio.model.folder import ModelDir
from smg_trio.model.image_worker import (
    ImageAnswer,
    ImageJob,
    framed,
    received_exactly,
    received_message,
)
from smg_trio.model.vision import ImageProcessor, VisionRefusal, load_vision

WORKER_MODULE: Final = "smg_trio.model.image_worker"


class ImageWorkerFailed(GatewayError):
    """The worker process failed or died on an image: the gateway's fault, a 500."""

    code = "image_processing_failed"


class _Slot:
    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._socket: socket.socket | None = None

    def exchange(self, job: bytes, budget_s: float | None) -> tuple[ImageAnswer, list[bytes]]:
        """`budget_s`: the caller's time left (its request's deadline); a worker that has not
        begun answering by then is killed (a hung or starved worker never outlives a request)."""
        message = framed(job)
        sock = self._started()
        try:
            sock.sendall(message)
        except OSError:  # it died idle (killed, out of memory): its successor takes the job
            self.stop()
            sock = self._started()
            sock.sendall(message)
        if budget_s is not None and not select.select([sock], [], [], max(0.0, budget_s))[0]:
            self.stop()
            raise ImageWorkerFailed("the image worker did not answer within the request's time")
        try:
            answer = _DECODER.decode(received_message(sock))
            datas = [received_exactly(sock, size) for size in answer.sizes]
        except (OSError, EOFError, msgspec.DecodeError) as exc:
            self.stop()  # respawned by the next exchange
            raise ImageWorkerFailed(f"the image worker died processing the image ({exc})") from None
        return answer, datas

    def _started(self) -> socket.socket:
        if self._socket is not None and self._process is not None and self._process.poll() is None:
            return self._socket
        self.stop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-m", WORKER_MODULE, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        self._socket = ours
        return ours

    def stop(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._process is not None:
            self._process.kill()
            self._process.wait()  # SIGKILL: at once
            self._process = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid


_DECODER: Final = msgspec.msgpack.Decoder(ImageAnswer)
_ENCODER: Final = msgspec.msgpack.Encoder()


class ImageWorkers:
    """`size` worker processes; `process` from at most `size` threads at once."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._slots = [_Slot() for _ in range(size)]
        # Last in, first out: the most recently used worker, warm, takes the next image.
        self._free: queue.LifoQueue[_Slot] = queue.LifoQueue()
        for slot in self._slots:
            self._free.put(slot)
        self._closed = threading.Event()

    def process(self, job: ImageJob, budget_s: float | None = None) -> ProcessedImage:
        if self._closed.is_set():
            raise ImageWorkerFailed("the gateway is shutting down")
        slot = self._free.get()  # never waits: callers are bounded by `size`
        try:
            answer, datas = slot.exchange(_ENCODER.encode(job), budget_s)
        finally:
            self._free.put(slot)
        return _processed(answer, datas)

    def pids(self) -> tuple[int, ...]:
        return tuple(pid for slot in self._slots if (pid := slot.pid) is not None)

    def close(self) -> None:
        self._closed.set()
        for slot in self._slots:
            slot.stop()


def _processed(answer: ImageAnswer, datas: list[bytes]) -> ProcessedImage:
    if answer.refusal is not None:
        raise ClientError(answer.refusal, code=answer.code or "invalid_image", param=answer.param)
    if answer.image is None:
        raise ImageWorkerFailed(f"the image worker failed: {answer.failure}")
    fields = tuple(
        msgspec.structs.replace(field, tensor=msgspec.structs.replace(field.tensor, data=data))
        for field, data in zip(answer.image.fields, datas, strict=True)
    )
    return msgspec.structs.replace(answer.image, fields=fields)


@dataclass(frozen=True)
class PooledImages:
    """A model's `ImageProcessor` whose work runs in the gateway's worker processes."""

    workers: ImageWorkers
    folder: Path
    model_id: str
    placeholder: str
    device_normalize: bool | None = None

    def process(
        self,
        data: bytes,
        param: str,
        options: Mapping[str, Any] | None = None,
        *,
        budget_s: float | None = None,
    ) -> ProcessedImage:
        """`budget_s`: the time the request has left (None: unbounded)."""
        return self._run(param, options, budget_s, data=data)

    def process_data_uri(
        self,
        uri: str,
        param: str,
        options: Mapping[str, Any] | None,
        *,
        max_bytes: int,
        budget_s: float | None = None,
    ) -> ProcessedImage:
        """A `data:` URI's image, its base64 decoded in the worker too."""
        return self._run(param, options, budget_s, data_uri=uri, max_bytes=max_bytes)

    def _run(
        self,
        param: str,
        options: Mapping[str, Any] | None,
        budget_s: float | None,
        **source: Any,
    ) -> ProcessedImage:
        job = ImageJob(
            folder=str(self.folder),
            model_id=self.model_id,
            param=param,
            options=dict(options) if options else None,
            device_normalize=self.device_normalize,
            **source,
        )
        return self.workers.process(job, budget_s)


def pooled_vision(
    folder: ModelDir, workers: ImageWorkers | None, device_normalize: bool | None = None
) -> ImageProcessor | VisionRefusal | None:
    """The folder's image processing, run by `workers` when given (docs/images.md §3), for
    engines started with `device_normalize` (vLLM's `--mm-device-do-normalize`; None: its
    default, docs/images.md §4.2)."""
    vision = load_vision(folder.path, folder.served_name, device_normalize=device_normalize)
    if workers is None or vision is None or isinstance(vision, VisionRefusal):
        return vision
    return PooledImages(
        workers, folder.path, folder.served_name, vision.placeholder, device_normalize
    )
