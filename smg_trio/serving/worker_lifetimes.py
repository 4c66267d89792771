"""I/O. Workers whose backends live in tasks of one nursery, so the gateway can add and remove
workers while it serves (docs/routing.md §6).

    open_worker_lifetimes(folders) ─ nursery
        ├─ task per worker: async with open_backend(spec) ─ started(worker) ─ wait for `close`
        │    └─ with `?kv_events=` and a KV index: its KV-event subscriber (docs/routing.md §9)
        └─ leaving the block closes every worker (their backends' own bounded cleanup)

- `open_worker(spec)` starts one task and returns once its backend is open (a ZMQ worker bound
  its handshake port, a gRPC one made its channel); a failure to open raises there, nothing
  left running. The worker serves the model its `?model=NAME` names (the first without one):
  its backend is opened for that model's folder and the worker carries the model's key
  (docs/fleet.md §4).
- `RuntimeWorkers` is what `/workers` drives: list the pool's snapshot, add a worker from a spec
  (the CLI's parser, so the same hard errors: a spec without a runtime or naming a model that
  is not served is a 400 naming it), and
  remove one: the pool stops routing to it at once, and its backend closes once the last
  request holding it ended (`WorkerPool.retire`).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import msgspec
import trio
import zmq

from smg_trio.backends.base import Backend
from smg_trio.backends.declared_model import DeclaredModel
from smg_trio.core.finalize import WorkerTarget
from smg_trio.errors import ClientError, ConfigError, GatewayError
from smg_trio.model.folder import ModelDir
from smg_trio.routing.kv_event_subscriber import subscribe_kv_events
from smg_trio.routing.kv_index import KvIndex
from smg_trio.routing.workers import Worker, WorkerPool, WorkerSnapshot
from smg_trio.serving.model_folders import ModelFolders
from smg_trio.serving.worker_specs import WorkerSpec, parse_worker_spec

# Opens one worker's backend and says the address it bound (ZMQ) or dials (gRPC).
BackendOpener = Callable[
    [WorkerSpec, ModelDir, DeclaredModel | None], AbstractAsyncContextManager[tuple[Backend, str]]
]


class WorkerLifetimes:
    """Each worker's backend held open by a task of one nursery until it is closed."""

    def __init__(
        self,
        nursery: trio.Nursery,
        folders: ModelFolders,
        opener: BackendOpener,
        kv_index: KvIndex | None = None,
    ) -> None:
        self._nursery = nursery
        self.folders = folders
        self._open_backend = opener
        self._kv_index = kv_index
        self._close: dict[str, trio.Event] = {}
        self._ids = itertools.count(1)

    async def open_worker(self, spec: WorkerSpec) -> tuple[Worker, str]:
        """A worker for `spec` with its backend open, and the address it bound or dials."""
        opened: tuple[Worker, str] = await self._nursery.start(self._hold, spec)
        return opened

    @property
    def subscribes(self) -> bool:
        """Workers' KV-event publishers are subscribed to (a policy reads them)."""
        return self._kv_index is not None

    def close(self, worker_id: str) -> None:
        """Let the worker's task leave its backend block (idempotent)."""
        event = self._close.pop(worker_id, None)
        if event is not None:
            event.set()

    def close_all(self) -> None:
        for worker_id in list(self._close):
            self.close(worker_id)

    async def _hold(
        self,
        spec: WorkerSpec,
        task_status: trio.TaskStatus[tuple[Worker, str]],
    ) -> None:
        model, declared = self.folders.of(spec.model)
        # With one model the engines are trusted as before; with several, an engine showing
        # another model than its worker's is refused (backends/declared_model.py).
        checked = declared if len(self.folders.specs) > 1 else None
        async with self._open_backend(spec, model, checked) as (backend, address):
            worker_id = f"w{next(self._ids)}"  # only a worker that opened takes an id
            bound = address.partition("://")[2]
            target = WorkerTarget(runtime=spec.runtime, wire=spec.wire, eos_ids=model.eos_ids)
            worker = Worker(
                name=worker_id,
                target=target,
                backend=backend,
                spec=f"{spec.runtime.value}+{spec.wire.value}://{bound}{spec.query}",
                model=declared.key,
            )
            closed = self._close[worker_id] = trio.Event()
            index = self._kv_index
            if spec.kv_events is None or index is None:
                task_status.started((worker, address))
                await closed.wait()
                return
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(
                        subscribe_kv_events, worker_id, spec.kv_events, spec.kv_replay, index
                    )
                    task_status.started((worker, address))
                    await closed.wait()
                    nursery.cancel_scope.cancel()
            finally:
                index.forget(worker_id)


@asynccontextmanager
async def open_worker_lifetimes(
    folders: ModelFolders, opener: BackendOpener, kv_index: KvIndex | None = None
) -> AsyncIterator[WorkerLifetimes]:
    """Workers opened with `opener` (worker_backends.open_backend) until the block ends.

    One failure comes out as itself, not in the ExceptionGroup trio's nursery puts it in: a
    startup ConfigError (a worker's busy port) stays the CLI's one-line exit 2, as it was when
    backends were opened without a nursery.
    """
    try:
        async with trio.open_nursery() as nursery:
            lifetimes = WorkerLifetimes(nursery, folders, opener, kv_index)
            try:
                yield lifetimes
            finally:
                lifetimes.close_all()
    except BaseExceptionGroup as group:
        only = group.exceptions[0] if len(group.exceptions) == 1 else None
        if isinstance(only, Exception):
            raise only from None
        raise


class WorkerAdded(msgspec.Struct, frozen=True):
    worker: WorkerSnapshot
    address: str


class RuntimeWorkers:
    """The `/workers` API's side of the gateway (frontends/workers_api.py calls it)."""

    def __init__(self, pool: WorkerPool, lifetimes: WorkerLifetimes) -> None:
        self._pool = pool
        self._lifetimes = lifetimes

    def snapshot(self) -> tuple[WorkerSnapshot, ...]:
        return self._pool.snapshot(trio.current_time())

    async def add(self, spec_text: str) -> WorkerAdded:
        try:
            spec = parse_worker_spec(spec_text)
        except ConfigError as exc:
            raise ClientError(exc.message, param="worker") from exc
        try:
            self._lifetimes.folders.of(spec.model)
        except KeyError:
            served = ", ".join(name for s in self._lifetimes.folders.specs for name in s.names)
            raise ClientError(
                f"worker {spec_text!r} names model {spec.model!r}, which is not served; "
                f"served: {served}",
                param="worker",
            ) from None
        if spec.kv_events is not None and not self._lifetimes.subscribes:
            raise ClientError(
                f"worker {spec_text!r} names a KV-event publisher, but no policy of this "
                "gateway reads KV events (docs/routing.md §9)",
                param="worker",
            )
        try:
            worker, address = await self._lifetimes.open_worker(spec)
        except (GatewayError, OSError, zmq.ZMQError) as exc:
            raise ClientError(
                f"worker {spec_text!r} cannot be opened: {exc}", param="worker"
            ) from exc
        self._pool.add(worker)
        row = next(row for row in self.snapshot() if row.id == worker.name)
        return WorkerAdded(worker=row, address=address)

    def remove(self, worker_id: str) -> WorkerSnapshot:
        """Stop routing to the worker; its backend closes once its requests ended."""
        row = next((row for row in self.snapshot() if row.id == worker_id), None)
        if row is None or row.removing:
            raise ClientError(
                f"no worker {worker_id!r} (GET /workers lists them)",
                status=404,
                code="not_found",
                param="id",
            )
        self._pool.retire(worker_id, lambda: self._lifetimes.close(worker_id))
        return msgspec.structs.replace(row, removing=True, routable=False)
