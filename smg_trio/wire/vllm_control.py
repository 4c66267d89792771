"""Pure. The bodies of vLLM's two control paths: `POST /inference/v1/abort_requests` (its
`--enable-scale-out`) and the dev-mode `POST /collective_rpc` (`VLLM_SERVER_DEV_MODE=1`);
docs/vllm-frontend.md §9, §10. A malformed body is a 400 naming what is wrong, never a 500.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from smg_trio.errors import ClientError


class CollectiveRpc(msgspec.Struct, frozen=True, kw_only=True):
    """One `/collective_rpc` call: the worker method and what it is called with. vLLM passes
    `args` and `kwargs` through as JSON gave them (the method decodes them if it must) and
    `timeout` (seconds, or null: none) to the engine, which bounds the workers' call with it."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    timeout: float | None = None


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise ClientError(f"JSON decode error: {exc}") from exc
    if not isinstance(value, dict):
        raise ClientError("Request body must be a JSON object")
    return value


def decode_abort_request(body: bytes) -> tuple[str, ...]:
    """The request ids an abort names: a list of ids, or one id (vLLM takes either)."""
    ids = _json_object(body).get("request_ids")
    if ids is None:
        raise ClientError("Missing 'request_ids' in request body", param="request_ids")
    if isinstance(ids, str):
        return (ids,)
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ClientError("'request_ids' must be a list of strings", param="request_ids")
    return tuple(ids)


def decode_collective_rpc(body: bytes) -> CollectiveRpc:
    """A `/collective_rpc` body, as vLLM reads it (`method` required)."""
    fields = _json_object(body)
    method = fields.get("method")
    if method is None:
        raise ClientError("Missing 'method' in request body", param="method")
    if not isinstance(method, str):
        raise ClientError("'method' must be a string", param="method")
    args = fields.get("args", [])
    if not isinstance(args, list):
        raise ClientError("'args' must be a list", param="args")
    kwargs = fields.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise ClientError("'kwargs' must be an object", param="kwargs")
    timeout = fields.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise ClientError("'timeout' must be a positive number of seconds", param="timeout")
    return CollectiveRpc(
        method=method,
        args=tuple(args),
        kwargs=kwargs,
        timeout=None if timeout is None else float(timeout),
    )


def collective_rpc_body(results: Sequence[Any] | None) -> bytes:
    """vLLM's answer: `{"results": [...]}`, one per worker, each JSON as it came when null, an
    object or a list, else its Python `str()` (so `True` is "True" and 3 is "3"); no results
    at all: an empty body."""
    if results is None:
        return b""
    shown = [r if r is None or isinstance(r, dict | list) else str(r) for r in results]
    return msgspec.json.encode({"results": shown})
