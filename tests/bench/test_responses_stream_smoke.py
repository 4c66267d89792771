"""`python -m bench responses_stream`, scaled down: every variant streams a whole generation
through the assembler, renderer and dialect at a per-token cost within a loose floor (a tenth of
core_pipeline's goal, best of three, so a loaded machine does not fail it while an
order-of-magnitude regression does), Responses within 3x of chat on the same text, and the
SQLite store round-trips through its pool."""

from __future__ import annotations

from typing import Final

import trio

from bench.responses_stream import per_token, store_round_trips

FLOOR_TOKENS_PER_S: Final = 10_000
RESPONSES_OVER_CHAT: Final = 3.0


def test_responses_streams_within_a_bound_of_chat() -> None:
    best: dict[str, float] = {}
    for _ in range(3):
        for name, ns in per_token(1):
            best[name] = min(ns, best.get(name, ns))
    assert len(best) == 4
    for name, ns in best.items():
        assert 1e9 / ns > FLOOR_TOKENS_PER_S, (name, ns)
    for kind in ("plain text", "reasoning + tool call"):
        assert best[f"Responses, {kind}"] < RESPONSES_OVER_CHAT * best[f"chat, {kind}"], best


def test_the_store_round_trips() -> None:
    put_us, get_us = trio.run(store_round_trips, 5)
    assert put_us > 0
    assert get_us > 0
