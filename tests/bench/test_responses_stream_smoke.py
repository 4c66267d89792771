"""`python -m bench responses_stream`, scaled down: every variant streams a whole generation
through the assembler, renderer and dialect at a per-token cost within a loose floor (a tenth of
core_pipeline's goal, best of three, so a loaded machine does not fail it while an
order-of-magnitude regression does), Responses within 3x of chat on the same text, and the
SQLite store round-trips through its pool."""

from __future__ import annotations

import re
from typing import Final

from tests.bench.bench_command import command_output, number, table_rows

FLOOR_TOKENS_PER_S: Final = 10_000
RESPONSES_OVER_CHAT: Final = 3.0
TIMEOUT_S: Final = 60.0


async def test_responses_streams_within_a_bound_of_chat_and_the_store_round_trips() -> None:
    text = await command_output(
        "responses_stream", "--repetitions", "3", "--stores", "5", "--no-write", timeout_s=TIMEOUT_S
    )
    best = {row[0]: number(row[1]) for row in table_rows(text, "chat,")}
    best |= {row[0]: number(row[1]) for row in table_rows(text, "Responses,")}
    assert len(best) == 4
    for name, ns in best.items():
        assert 1e9 / ns > FLOOR_TOKENS_PER_S, (name, ns)
    for kind in ("plain text", "reasoning + tool call"):
        assert best[f"Responses, {kind}"] < RESPONSES_OVER_CHAT * best[f"chat, {kind}"], best
    store = re.search(r"put ([\d,]+) µs, get ([\d,]+) µs", text)
    assert store is not None
    assert all(float(value.replace(",", "")) > 0 for value in store.groups())
