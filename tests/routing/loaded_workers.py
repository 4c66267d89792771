"""Workers whose readiness and load the test sets: routing only reads `statistics()`."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from smg_trio.backends.base import BackendStatistics, EngineStream
from smg_trio.core.finalize import Finalized, WorkerTarget
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.routing.vocabulary import Worker

TARGET = WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ)


class LoadedBackend:
    """A `Backend` reporting the readiness and in-flight count the test sets."""

    def __init__(self, *, ready: bool = True, in_flight: int = 0) -> None:
        self.ready = ready
        self.in_flight = in_flight

    @property
    def runtime(self) -> Runtime:
        return Runtime.VLLM

    @property
    def wire(self) -> Wire:
        return Wire.ZMQ

    def open_stream(self, finalized: Finalized) -> AbstractAsyncContextManager[EngineStream]:
        raise AssertionError("picking a worker never opens a stream")

    async def wait_ready(self) -> None:
        raise AssertionError("picking a worker never waits for readiness")

    def statistics(self) -> BackendStatistics:
        return BackendStatistics(
            runtime=self.runtime,
            wire=self.wire,
            ready=self.ready,
            max_model_len=None,
            open_streams=0,
            in_flight=self.in_flight,
            engines=(),
        )


def loaded_worker(name: str, *, in_flight: int = 0, ready: bool = True) -> Worker:
    return Worker(name, TARGET, LoadedBackend(ready=ready, in_flight=in_flight))


def backend_of(worker: Worker) -> LoadedBackend:
    backend = worker.backend
    assert isinstance(backend, LoadedBackend)
    return backend
