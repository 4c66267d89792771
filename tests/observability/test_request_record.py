"""A request's record keeps what a failure says, never the exception itself (whose traceback
holds the request's frames and body: docs/limits.md §2)."""

from __future__ import annotations

from smg_trio.errors import ClientError
from smg_trio.observability.request_record import RequestRecord


def test_a_failed_record_keeps_the_code_and_status_not_the_exception() -> None:
    record = RequestRecord("r1", "/v1/chat/completions", "http1", "-", keeps_text=False)
    error = ClientError("too long", code="context_length_exceeded")
    record.failed(error)
    held = [getattr(record, name, None) for name in RequestRecord.__slots__]
    assert not any(value is error for value in held)
    assert (record.status, record.error_code) == (400, "context_length_exceeded")
    record.retrying()
    assert (record.status, record.error_code) == (200, None)
