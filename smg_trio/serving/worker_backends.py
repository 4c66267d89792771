"""I/O. The backend of one worker spec (`RUNTIME+WIRE://HOST:PORT`), opened by its wire.

ZMQ: the handshake port the engines dial is bound (port 0 picks one); gRPC: a channel to the
engine, ready once its health check passes. `serve` hands `open_backend` to
`worker_lifetimes.open_worker_lifetimes`, which holds each worker's backend in a task of its
own, so /workers can add and remove workers later (docs/routing.md §6).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import assert_never

from smg_trio.backends.base import Backend
from smg_trio.backends.declared_model import DeclaredModel
from smg_trio.backends.grpc_backend import open_grpc_backend
from smg_trio.backends.zmq_adopted import AdoptedListeners
from smg_trio.backends.zmq_backend import open_zmq_backend
from smg_trio.backends.zmq_clients import ZmqClient
from smg_trio.model.folder import ModelDir
from smg_trio.neutral.capabilities import require_adapter
from smg_trio.neutral.runtime import Wire
from smg_trio.serving.config import DEFAULT_ENGINE_SILENCE_S
from smg_trio.serving.worker_specs import WorkerSpec


def check_worker_available(spec: WorkerSpec) -> None:
    """A worker this build can open; anything else is a ConfigError before startup.

    `parse_worker_spec` already refused pairs without an adapter; this is the last guard before
    a socket is opened, so a spec built by hand cannot slip through.
    """
    require_adapter(spec.runtime, spec.wire)


@asynccontextmanager
async def open_backend(
    spec: WorkerSpec,
    model: ModelDir,
    declared: DeclaredModel | None = None,
    *,
    engine_silence_s: float = DEFAULT_ENGINE_SILENCE_S,
    clients: Mapping[WorkerSpec, ZmqClient] | None = None,
    adopted: Mapping[WorkerSpec, AdoptedListeners] | None = None,
) -> AsyncIterator[tuple[Backend, str]]:
    """The backend of one worker spec and the address it is bound to (ZMQ) or dials (gRPC);
    `clients`: this process's side of each ZMQ worker when several share it (processes.md §3);
    `declared`: the model its engine must show (backends/declared_model.py).
    `adopted`: a ZMQ worker's listeners inherited from `vllm serve` (docs/vllm-frontend.md)."""
    check_worker_available(spec)
    match spec.wire:
        case Wire.ZMQ:
            listeners = None if adopted is None else adopted.get(spec)
            async with open_zmq_backend(
                runtime=spec.runtime,
                handshake_address=f"tcp://{spec.address}",
                vocab_size=model.tokenizer.vocab_size,
                engine_silence_s=engine_silence_s,
                client=None if clients is None else clients.get(spec),
                declared=declared,
                adopted=listeners,
                engine_count=1 if listeners is None else listeners.engine_count,
            ) as zmq_backend:
                yield zmq_backend, zmq_backend.handshake_address
        case Wire.GRPC:
            async with open_grpc_backend(
                runtime=spec.runtime,
                address=spec.address,
                engine_silence_s=engine_silence_s,
                declared=declared,
            ) as grpc_backend:
                yield grpc_backend, f"grpc://{spec.address}"
        case _:
            assert_never(spec.wire)
