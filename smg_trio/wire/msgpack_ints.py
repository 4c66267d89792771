"""Pure. Whether an integer fits a msgpack int field, for both ZMQ request builders.

A value an engine cannot decode can take down its input thread (vLLM) or get the frame dropped
without an answer (TokenSpeed), so we reject it first with a 400 naming the parameter. A float
(16.0) or a bool on an int field fails msgspec validation inside the engine, so those are
refused too. What values are meaningful is `neutral.validation`'s and finalize's business.
"""

from __future__ import annotations

from typing import Final

from smg_trio.errors import ClientError

_MSGPACK_INT_MIN: Final = -(2**63)
_MSGPACK_INT_MAX: Final = 2**64 - 1


def checked_int(value: int, param: str) -> int:
    """`value` if it is a real int that msgpack can carry."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ClientError(f"{param} must be an integer, got {value!r}", param=param)
    if not _MSGPACK_INT_MIN <= value <= _MSGPACK_INT_MAX:
        raise ClientError(f"{param} is out of range: {value}", param=param)
    return value
