"""I/O. Request ids: `x-request-id` in and out, and the id on every log line of its request.

- The id is the client's `x-request-id` header when it sends one (as vLLM's server reads it),
  else a fresh one. It names the request everywhere: the response id (`chatcmpl-ID`), the
  engine request id (the backends add a unique suffix to it), the `x-request-id` response header
  (on every HTTP answer, errors included), and the `request_id` of every log record emitted
  while the request is served.
- Logging uses a context variable: trio gives every task a copy of its parent's context, so
  the request's own tasks (its writer, the backend stream's cleanup and aborts) see the id that
  `Gateway.handle` set, and no other request's tasks do. `RequestIdLogFilter` copies it onto
  each record (`-` outside any request); `cli` installs it on the log handler.
"""

from __future__ import annotations

import contextvars
import logging
import uuid
from typing import Final

from smg_trio.errors import ClientError

REQUEST_ID_HEADER: Final = b"x-request-id"
MAX_REQUEST_ID_LENGTH: Final = 256
NO_REQUEST: Final = "-"

current_request_id: Final = contextvars.ContextVar[str]("smg_trio_request_id", default=NO_REQUEST)


def new_request_id() -> str:
    return uuid.uuid4().hex


def request_id_from_header(value: bytes | str | None, *, param: str = "x-request-id") -> str:
    """The client's id (the `x-request-id` header, or `param` where it came from elsewhere),
    checked, or a fresh id when it sent none.

    The id travels to engines and into log lines, so only visible ASCII is taken (a header
    cannot carry more anyway, and an engine id must stay printable); anything else is a 400
    naming `param`.
    """
    if isinstance(value, str):
        value = value.encode("utf-8")
    if value is None or not value.strip():
        return new_request_id()
    text = value.strip()
    if len(text) > MAX_REQUEST_ID_LENGTH or not all(0x21 <= byte <= 0x7E for byte in text):
        raise ClientError(
            f"{param} must be 1 to {MAX_REQUEST_ID_LENGTH} visible ASCII characters",
            param=param,
        )
    return text.decode("ascii")


class RequestIdLogFilter(logging.Filter):
    """Adds `record.request_id`: the id of the request being served, or `-` (a record that
    names its request itself, as the request log's lines do, keeps its own)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = current_request_id.get()
        return True
