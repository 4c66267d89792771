"""I/O. The `/workers` admin API (docs/routing.md §6): list, add and remove engine workers while
the gateway serves, behind the admin key.

    GET    /workers        → 200 {"object": "list", "data": [worker, ...]}
    POST   /workers        → 201 {"worker": {...}, "address": "..."}   body {"worker": "SPEC"}
    DELETE /workers/{id}   → 202 the worker, "removing": true; its backend closes once the
                             requests it is serving ended

- Without `--admin-api-key` every /workers request is a 403 (the API is off); with it, a
  missing or wrong `Authorization: Bearer KEY` is a 401. The gateway's own `--api-key` does not
  open it.
- A spec is parsed exactly as `--worker` is: a bad one (no runtime, an unknown runtime, no
  adapter for the wire, a bad address) is a 400 naming `worker`; an unknown id is a 404.
"""

from __future__ import annotations

import hmac
from typing import Final, Protocol

import msgspec

from smg_trio.errors import ClientError
from smg_trio.frontends.answers import send_json
from smg_trio.frontends.http.asgi_types import Send
from smg_trio.request.routes import WORKERS_PATH, path_id
from smg_trio.routing.workers import WorkerSnapshot

_ENCODER: Final = msgspec.json.Encoder()


class WorkerAdded(Protocol):
    @property
    def worker(self) -> WorkerSnapshot: ...

    @property
    def address(self) -> str: ...


class WorkerAdmin(Protocol):
    """What the API drives (`worker_lifetimes.RuntimeWorkers`)."""

    def snapshot(self) -> tuple[WorkerSnapshot, ...]: ...

    async def add(self, spec_text: str) -> WorkerAdded: ...

    def remove(self, worker_id: str) -> WorkerSnapshot: ...


class _AddWorker(msgspec.Struct, forbid_unknown_fields=True):
    worker: str


class _WorkerList(msgspec.Struct):
    data: tuple[WorkerSnapshot, ...]
    object: str = "list"


def authorize_admin(admin_api_key: bytes | None, authorization: bytes) -> None:
    if admin_api_key is None:
        raise ClientError(
            "the /workers API is off: start the gateway with --admin-api-key",
            status=403,
            code="forbidden",
        )
    scheme, _, token = authorization.partition(b" ")
    if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), admin_api_key):
        raise ClientError(
            "missing or invalid admin key: send `Authorization: Bearer ADMIN_KEY`",
            status=401,
            code="invalid_api_key",
        )


async def serve_workers(
    admin: WorkerAdmin, method: str, path: str, body: bytes, send: Send
) -> None:
    """Answer one authorized /workers request whose method its route accepts."""
    if path == WORKERS_PATH and method == "GET":
        await send_json(send, 200, _ENCODER.encode(_WorkerList(data=admin.snapshot())))
    elif path == WORKERS_PATH:
        try:
            request = msgspec.json.decode(body, type=_AddWorker)
        except msgspec.DecodeError as exc:
            raise ClientError(
                f'expected {{"worker": "RUNTIME+WIRE://HOST:PORT"}}: {exc}', param="worker"
            ) from exc
        added = await admin.add(request.worker)
        await send_json(
            send, 201, _ENCODER.encode({"worker": added.worker, "address": added.address})
        )
    else:
        removed = admin.remove(path_id(path))
        await send_json(send, 202, _ENCODER.encode(removed))
