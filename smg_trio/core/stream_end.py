"""Pure. How a finished stream ends, as data: the closing chunks and what the chunks reported.

The response assembler builds one `StreamEnd` when every choice is over; a front end sends its
`payloads` like any other chunks and then its own end marker, built from `finish` and `usage`
without reading a chunk back (SSE sends `data: [DONE]`; the WebSocket `done` frame carries both
fields as they are).
"""

from __future__ import annotations

import msgspec

from smg_trio.wire.openai_responses import Usage


class ChoiceFinish(msgspec.Struct, frozen=True):
    """One choice's ending as its finish chunk reported it (`matched_stop` None when the chunk
    carried none: completions never do, streaming chat omits token stops)."""

    index: int
    reason: str
    matched_stop: str | int | None


class StreamEnd(msgspec.Struct, frozen=True, kw_only=True):
    payloads: tuple[bytes, ...] = ()
    """Chunks that close the stream (the usage chunk when the client asked for it)."""
    finish: tuple[ChoiceFinish, ...] = ()
    """The finished choices, by index."""
    usage: Usage | None = None
    """The token counts the stream reported: its usage chunk's, or for /generate the sum of the
    choices' final `meta_info` counts; None when the stream reports none."""
