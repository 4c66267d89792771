"""Pure. What a msgspec decode error says, read once for every client API's decoder: the
field it is about (as a client writes it: `messages[0].role`), msgspec's text without its
location, and whether the field is unknown. Each API words its own 400 from this (OpenAI
chat/completions in `wire/openai_decode.py`, Responses in `wire/responses_api.py`, Anthropic
Messages in `core/anthropic_request.py`; docs/client-apis.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

import msgspec

from smg_trio.errors import ClientError
from smg_trio.wire.json_depth import check_json_depth

T = TypeVar("T")

_AT: Final = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_UNKNOWN: Final = re.compile(r"^Object contains unknown field `(?P<field>[^`]+)`")
_MISSING: Final = re.compile(r"^Object missing required field `(?P<field>[^`]+)`")


@dataclass(frozen=True, slots=True)
class DecodeFailure:
    message: str
    """msgspec's whole message."""
    valid_json: bool
    """False: the body is not JSON at all (then nothing else is known)."""
    path: str = ""
    """The field, dotted from the body's root (a missing or unknown field included); "" when
    the whole body is at fault."""
    text: str = ""
    """The message without its ` - at `$...`` tail."""
    unknown_field: bool = False


def read_decode_error(exc: msgspec.DecodeError, prefix: str = "") -> DecodeFailure:
    """What `exc` says; `prefix` is where the decoded value sits in the body (`input[2]`)."""
    message = str(exc)
    if not isinstance(exc, msgspec.ValidationError):
        return DecodeFailure(message, valid_json=False)
    at = _AT.search(message)
    path = at.group("path") if at else ""
    if prefix:
        path = prefix + ("." if path and not path.startswith("[") else "") + path
    unknown = _UNKNOWN.match(message)
    named = unknown or _MISSING.match(message)
    if named:
        path = f"{path}.{named.group('field')}" if path else named.group("field")
    text = message if at is None else message[: at.start()]
    return DecodeFailure(message, True, path, text, unknown_field=unknown is not None)


def decode_body(
    decoder: msgspec.json.Decoder[T],
    body: bytes,
    to_error: Callable[[msgspec.DecodeError], ClientError],
) -> T:
    """A request body decoded by `decoder` once its nesting depth passed the check; a decode
    error is raised as the API's own 400, `to_error(exc)` (without msgspec's traceback)."""
    check_json_depth(body)
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise to_error(exc) from None
