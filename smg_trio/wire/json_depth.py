"""Pure. How deep a JSON text nests, decided over its bytes before any decoder sees it.

msgspec decodes (and skips unknown fields) recursively: past Python's recursion limit it raises
RecursionError, on HTTP bodies and WebSocket frames alike, whatever field the nesting sits in.
`check_json_depth` refuses such a text first, as a 400 naming the limit (docs/limits.md §3).

The scan is O(n) and runs in the regex engine: only brackets and strings are matched (a string's
brackets are not structure), and a text with fewer opening brackets than the limit, which is
every ordinary request, is passed by two `count` calls without a scan at all.
`shallow_json` keeps a text's top level and replaces every nested value by `null`, so the
WebSocket front end can still read the `id` of a frame too deep to decode.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from smg_trio.errors import ClientError

# Far below msgspec's own failure (between 100 and 1000 levels, from Python's recursion limit,
# less what the caller's frames already use); far above any real request (a JSON schema in
# response_format nests a few dozen levels at most).
MAX_JSON_DEPTH: Final = 128

# A string (escapes included; an unterminated one runs to the end) or one bracket.
_TOKENS_BYTES: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
_TOKENS_TEXT: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
_OPENERS: Final = frozenset("[{")
_CLOSERS: Final = frozenset("]}")
_OPENER_BYTES: Final = frozenset(b"[{")
_CLOSER_BYTES: Final = frozenset(b"]}")


class JsonTooDeep(ClientError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            f"The request body is not valid JSON for this API: it nests deeper than {limit} levels",
            code="json_too_deep",
        )


def json_depth_exceeds(text: bytes | str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when some bracket of `text` opens at a depth over `limit` (strings do not count)."""
    if isinstance(text, str):
        if text.count("[") + text.count("{") <= limit:
            return False
        firsts = (m.group()[0] for m in _TOKENS_TEXT.finditer(text))
        return _deeper_than(firsts, limit, _OPENERS, _CLOSERS)
    if text.count(b"[") + text.count(b"{") <= limit:
        return False
    first_bytes = (m.group()[0] for m in _TOKENS_BYTES.finditer(text))
    return _deeper_than(first_bytes, limit, _OPENER_BYTES, _CLOSER_BYTES)


def _deeper_than(
    firsts: Iterator[str] | Iterator[int],
    limit: int,
    openers: frozenset[str] | frozenset[int],
    closers: frozenset[str] | frozenset[int],
) -> bool:
    """Over the first character of each token (a quote starts a string, skipped whole)."""
    depth = 0
    for first in firsts:
        if first in openers:
            depth += 1
            if depth > limit:
                return True
        elif first in closers and depth > 0:
            depth -= 1
    return False


def check_json_depth(text: bytes | str, limit: int = MAX_JSON_DEPTH) -> None:
    """400 `json_too_deep` when `text` nests deeper than `limit`; else nothing."""
    if json_depth_exceeds(text, limit):
        raise JsonTooDeep(limit)


def shallow_json(text: str) -> str:
    """`text` with every value nested below the top level replaced by `null`.

    The top-level object keeps its scalar members (a frame's `type` and `id`); an invalid text
    stays invalid. Linear in the text's length.
    """
    pieces: list[str] = []
    kept_to = 0
    depth = 0
    nested_from = 0
    for match in _TOKENS_TEXT.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth == 2:
                nested_from = match.start()
        elif token in ("]", "}"):
            if depth == 2:
                pieces.append(text[kept_to:nested_from])
                pieces.append("null")
                kept_to = match.end()
            depth = max(depth - 1, 0)
    pieces.append(text[kept_to:] if depth < 2 else text[kept_to:nested_from] + "null}")
    return "".join(pieces)
