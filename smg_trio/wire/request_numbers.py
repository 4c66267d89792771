"""Pure. The integer type of every client request field: a JSON integer within int64.

msgspec decodes a JSON integer of any size into `int`; one far past int64 (a 300-digit `seed`)
used to reach the value checks, whose float comparison raised `OverflowError`, a 500 (issue 45).
Every request Struct's integer field is `Int` instead, so such a number is refused by the
decoder itself, a 400 naming the field (`Expected int <= 9223372036854775807 - at $.seed`),
before anything computes with it. No field of any API takes a wider integer: seeds are int64
in vLLM, token ids u32, counts far smaller. Floats need nothing of the kind: msgspec refuses a
number past float range (`1e400`, a 400-digit integer) on a float field as out of range.
"""

from __future__ import annotations

from typing import Annotated, TypeAlias

import msgspec

from smg_trio.neutral.validation import INT64_MAX, INT64_MIN

Int: TypeAlias = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
